// The FP8 kernel's shared memory: where each stage, the hand-off's tile buffer, the barriers and
// the unit prefix live. Its stages are K-major, 128B-swizzled e4m3 (wgmma descriptors:
// common/smem_descriptor.cuh). Every CTA of a cluster has the same layout, so a multicast TMA
// lands at the same offsets (and signals the same barrier) in each.
#pragma once

#include <cutlass/arch/barrier.h>

#include <cstdint>

#include "cuda/gemm/common/pipeline.cuh"
#include "cuda/gemm/common/smem_descriptor.cuh"
#include "cuda/gemm/common/tile_handoff.cuh"
#include "cuda/gemm/fp8/config.h"

namespace moefuse::gemm::fp8 {

// G: the tile geometry (config.h, Fp8Tile).
template <class G>
struct TileSharedLayout {
  static constexpr int kStages = G::kStages;
  static constexpr int kBBytes = G::kBBytes;
  static constexpr int kTileBytes = G::kTileBytes;

  uint8_t* a;            // kStages × [kBlockM rows × 128 B], 128B-swizzled
  uint8_t* b;            // kStages × [G::kBlockN rows × 128 B], 128B-swizzled
  float* a_scale;        // kStages × [kScaleSlotBytes]: activation scales of a K group (config.h)
  uint8_t* tile;         // kTileBytes: the hand-off's tile buffer (bf16 forward output, dGLU)
  float* amax_own;       // [kBlockM]: E4M3 GLU output, this CTA's row amax (e4m3_drain.cuh)
  float* amax_peer;      // [kAmaxBuffers][kBlockM]: the partner CTA's, written by it (DSMEM)
  uint64_t* full;        // [kStages] producers → consumers: the stage holds data
  uint64_t* empty;       // [kStages] consumers of both CTAs → producer: may be overwritten
  uint64_t* tile_full;   // consumers → epilogue warps (common/tile_handoff.cuh)
  uint64_t* tile_empty;  // epilogue warps → consumers
  uint64_t* amax_full;   // [2] the partner's epilogue warps → ours: amax_peer[b] written
  uint64_t* amax_empty;  // [2] the partner's epilogue warps → ours: their amax_peer[b] read
  int* unit_start;       // [E + 1] exclusive prefix of the work-unit counts

  // Byte offsets from `a` (the swizzle-aligned base), for code that addresses stages as base +
  // constant in 32-bit shared addresses (the consumers' K loop, mainloop.cuh).
  static constexpr int kBOffset = kStages * kABytes;
  static constexpr int kScaleOffset = kBOffset + kStages * kBBytes;
  static constexpr int kTileOffset = kScaleOffset + kStages * kScaleSlotBytes;
  static constexpr int kAmaxOffset = kTileOffset + kTileBytes;
  static constexpr int kFullOffset = kAmaxOffset + kAmaxBytes;
  static constexpr int kEmptyOffset = kFullOffset + kStages * int{sizeof(uint64_t)};

  __device__ static TileSharedLayout carve(uint8_t* raw) {
    TileSharedLayout s;
    s.a = align_to_swizzle_atom(raw);
    s.b = s.a + kBOffset;
    s.a_scale = reinterpret_cast<float*>(s.a + kScaleOffset);
    s.tile = s.a + kTileOffset;
    s.amax_own = reinterpret_cast<float*>(s.a + kAmaxOffset);
    s.amax_peer = s.amax_own + kBlockM;
    s.full = reinterpret_cast<uint64_t*>(s.a + kFullOffset);
    s.empty = reinterpret_cast<uint64_t*>(s.a + kEmptyOffset);
    s.tile_full = s.empty + kStages;
    s.tile_empty = s.tile_full + 1;
    s.amax_full = s.tile_empty + 1;
    s.amax_empty = s.amax_full + kAmaxBuffers;
    s.unit_start = reinterpret_cast<int*>(s.amax_empty + kAmaxBuffers);
    return s;
  }
  __device__ uint8_t* a_stage(int stage) const { return a + stage * kABytes; }
  __device__ uint8_t* b_stage(int stage) const { return b + stage * kBBytes; }
  __device__ float* scale_stage(int stage) const {
    return a_scale + stage * (kScaleSlotBytes / 4);
  }

  // Every barrier, by one thread, before the cluster-wide barrier that precedes any use.
  __device__ void init_barriers(int epilogue_threads) const {
    init_stage_barriers<kStages>(full, empty, 1, kEmptyArrivals);
    TileHandoff::init_barriers(tile_full, tile_empty, epilogue_threads);
    for (int b = 0; b < kAmaxBuffers; ++b) {  // e4m3_drain.cuh has the protocol
      ClusterBarrier::init(&amax_full[b], 1);  // + the partner's transaction bytes
      ClusterBarrier::init(&amax_empty[b], epilogue_threads);
    }
    cutlass::arch::fence_barrier_init();
  }
};
// Every instantiation but the wide bf16 forward's.
using SharedLayout = TileSharedLayout<Fp8Tile<kBlockN>>;

}  // namespace moefuse::gemm::fp8
