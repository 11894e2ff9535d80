// Shared memory of the kernels with the overlapped epilogue (forward, dgrad, wgrad): kStages A
// and B stages (128B-swizzled, 1024-byte aligned), the hand-off's tile buffer, the stage
// barriers, the hand-off barriers, then tile_start[E + 1]. Each kernel's config.h sizes it (its
// smem_bytes function must follow this order) and checks the arithmetic at compile time.
#pragma once

#include <cutlass/arch/barrier.h>

#include <cstdint>

#include "cuda/gemm/common/pipeline.cuh"
#include "cuda/gemm/common/smem_descriptor.cuh"
#include "cuda/gemm/common/tile_handoff.cuh"

namespace moefuse::gemm {

template <int kStages, int kABytes, int kBBytes, int kTileBytes>
struct HandoffSharedLayout {
  uint8_t* a;            // kStages × kABytes
  uint8_t* b;            // kStages × kBBytes
  uint8_t* tile;         // kTileBytes: the hand-off's tile buffer, or the in-consumer
                         // epilogue's per-warpgroup buffers (fp32 and gather forward: staging;
                         // gather wgrad: TMA-store sub-tiles)
  uint64_t* full;        // [kStages] producer → consumers: the stage holds data
  uint64_t* empty;       // [kStages] consumers → producer: the stage may be overwritten
  uint64_t* tile_full;   // consumers → epilogue warps: the tile buffer holds a (part of a) tile
  uint64_t* tile_empty;  // epilogue warps → consumers: the tile buffer may be overwritten
  int* tile_start;       // [E + 1] exclusive prefix of the tile counts (M-ragged kernels; the
                         // dgrad's: of its units, cluster_scheduler.h); the TMA wgrad's expert
                         // order (backward/wgrad_order.h), the FP8 wgrad's group_start and order

  __device__ static HandoffSharedLayout carve(uint8_t* raw) {
    HandoffSharedLayout s;
    s.a = align_to_swizzle_atom(raw);
    s.b = s.a + kStages * kABytes;
    s.tile = s.b + kStages * kBBytes;
    s.full = reinterpret_cast<uint64_t*>(s.tile + kTileBytes);
    s.empty = s.full + kStages;
    s.tile_full = s.empty + kStages;
    s.tile_empty = s.tile_full + 1;
    s.tile_start = reinterpret_cast<int*>(s.tile_empty + 1);
    return s;
  }
  __device__ uint8_t* a_stage(int stage) const { return a + stage * kABytes; }
  __device__ uint8_t* b_stage(int stage) const { return b + stage * kBBytes; }

  // Every barrier, by one thread, before the CTA-wide (or cluster-wide) barrier.
  __device__ void init_barriers(int full_arrivals, int epilogue_threads = kEpilogueThreads,
                                int empty_arrivals = kConsumerThreads) const {
    init_stage_barriers<kStages>(full, empty, full_arrivals, empty_arrivals);
    TileHandoff::init_barriers(tile_full, tile_empty, epilogue_threads);
    cutlass::arch::fence_barrier_init();
  }
};

}  // namespace moefuse::gemm
