// Shared pieces of the backward kernels' mainloop: shared-memory carve-up, wgmma descriptors for
// K-major and MN-major operands, TMA tile loads of either major-ness, and the consumer K loop.
//
// Operand layouts in shared memory (both 128B-swizzled, 1024-byte aligned stage bases):
//   K-major  [rows × 64 K]: row r at r·128 bytes (one TMA box, as the forward kernel).
//   MN-major [64 K rows × MN]: boxes of 64 MN-contiguous elements × 64 K rows (8 KiB each) back
//            to back; inside a box, K row k at k·128 bytes. wgmma's canonical MN-major SW128
//            layout ((8,n),(8,k)):((1,LBO),(8,SBO)) in 16-byte units (cute make_gmma_desc<MN>)
//            then has LBO = 8 KiB (next 64-wide MN chunk) and SBO = 1 KiB (next 8 K rows).
//
// Pipeline protocol (kStages stages, `full` and `empty` mbarriers each), as the forward kernel:
//   producer: wait empty[s] (parity phase ^ 1), arrive.expect_tx(full[s], bytes), TMA loads
//     (or cp.async + cp.async.mbarrier.arrive.noinc for the gathered operand).
//   consumers: wait full[s] (parity phase), [tail fix-up], 4 wgmma k16, commit; once the
//     previous stage's wgmmas retire (wait_group 1) every consumer thread arrives on its empty
//     barrier (count 256). One wgmma batch stays in flight across stage boundaries.
// Both roles walk the same tiles and K-block counts, so their (stage, phase) stay in lockstep.
#pragma once

#include <cuda.h>
#include <cuda_bf16.h>

#include <cute/arch/copy_sm90_desc.hpp>
#include <cute/arch/copy_sm90_tma.hpp>
#include <cute/arch/mma_sm90_gmma.hpp>
#include <cutlass/arch/barrier.h>

#include <utility>

#include "cuda/gemm/backward/config.h"
#include "cuda/gemm/backward/pairs.cuh"

namespace moefuse::gemm::bwd {

using cutlass::arch::ClusterBarrier;
using cutlass::arch::ClusterTransactionBarrier;
using Major = cute::SM90::GMMA::Major;

inline constexpr uint64_t kCacheHintNormal =
    static_cast<uint64_t>(cute::TMA::CacheHintSm90::EVICT_NORMAL);

struct SharedLayout {
  uint8_t* a;            // kStages × kABytes
  uint8_t* b;            // kStages × kBBytes
  uint8_t* tile;         // kTileBufferBytes: the epilogue hand-off (tile_handoff.cuh)
  uint64_t* full;        // [kStages]
  uint64_t* empty;       // [kStages]
  uint64_t* tile_full;   // consumers → epilogue warps: the tile buffer holds a (part of a) tile
  uint64_t* tile_empty;  // epilogue warps → consumers: the tile buffer may be overwritten
  int* tile_start;       // [E + 1] (dgrad only)

  __device__ static SharedLayout carve(uint8_t* raw) {
    uint8_t* base = reinterpret_cast<uint8_t*>(
        (reinterpret_cast<uintptr_t>(raw) + kSwizzleAtomBytes - 1) &
        ~uintptr_t{kSwizzleAtomBytes - 1});
    SharedLayout s;
    s.a = base;
    s.b = s.a + kStages * kABytes;
    s.tile = s.b + kStages * kBBytes;
    s.full = reinterpret_cast<uint64_t*>(s.tile + kTileBufferBytes);
    s.empty = s.full + kStages;
    s.tile_full = s.empty + kStages;
    s.tile_empty = s.tile_full + 1;
    s.tile_start = reinterpret_cast<int*>(s.tile_empty + 1);
    return s;
  }
  __device__ uint8_t* a_stage(int stage) const { return a + stage * kABytes; }
  __device__ uint8_t* b_stage(int stage) const { return b + stage * kBBytes; }
  // The gather wgrad's per-consumer staging buffers (staged_store.cuh) live in the tile buffer.
  __device__ uint8_t* epilogue_stage(int slab) const { return tile + slab * kEpilogueStageBytes; }

  // Barrier init by one thread, before the CTA-wide __syncthreads.
  __device__ void init_barriers(int full_arrivals) const {
    for (int s = 0; s < kStages; ++s) {
      ClusterBarrier::init(&full[s], full_arrivals);
      ClusterBarrier::init(&empty[s], kConsumerThreads);
    }
    ClusterBarrier::init(tile_full, kConsumerThreads);
    ClusterBarrier::init(tile_empty, kEpilogueThreads);
    cutlass::arch::fence_barrier_init();
  }
};

struct PipelineState {
  int stage = 0;
  uint32_t phase = 0;
  __device__ void advance() {
    if (++stage == kStages) {
      stage = 0;
      phase ^= 1u;
    }
  }
};

// wgmma descriptor (PTX ISA "matrix descriptor"): start address >> 4 in bits 0-13, leading byte
// offset >> 4 in 16-29, stride byte offset >> 4 in 32-45, layout type 1 = SWIZZLE_128B in 62-63.
__device__ __forceinline__ uint64_t make_desc(const void* smem, uint32_t lbo, uint32_t sbo) {
  const uint32_t addr = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
  return uint64_t{(addr & 0x3FFFFu) >> 4} | (uint64_t{lbo >> 4} << 16) |
         (uint64_t{sbo >> 4} << 32) | (uint64_t{1} << 62);
}

template <Major kMajor>
struct OperandDesc;

// K-major: LBO unused (1 by convention), SBO = one swizzle atom; K advances 16 elements = 32
// bytes inside the 128-byte row (the hardware applies the swizzle to the final address).
template <>
struct OperandDesc<Major::K> {
  static constexpr uint64_t kStep = 32 >> 4;
  __device__ static uint64_t make(const void* smem) {
    return make_desc(smem, 16, kSwizzleAtomBytes);
  }
};

// MN-major: LBO = next 64-wide MN chunk, SBO = next 8 K rows; K advances 16 rows = 2 atoms.
template <>
struct OperandDesc<Major::MN> {
  static constexpr uint64_t kStep = (2 * kSwizzleAtomBytes) >> 4;
  __device__ static uint64_t make(const void* smem) {
    return make_desc(smem, kMnChunkBytes, kSwizzleAtomBytes);
  }
};

// acc += A_slab · B_stage for one 64-row slab and a 256-column stage, K = 16.
template <Major kA, Major kB, size_t... I>
__device__ __forceinline__ void wgmma_m64n256k16(uint64_t desc_a, uint64_t desc_b,
                                                 float (&acc)[128], std::index_sequence<I...>) {
  using Mma = cute::SM90::GMMA::MMA_64x256x16_F32BF16BF16_SS<kA, kB>;
  Mma::fma(desc_a, desc_b, acc[I]..., cute::SM90::GMMA::ScaleOut::One);
}

__device__ __forceinline__ void fence_accumulators(float (&acc)[128]) {
#pragma unroll
  for (int i = 0; i < 128; ++i) cute::warpgroup_fence_operand(acc[i]);
}

// TMA of an MN-major tile: `chunks` boxes of [64 K rows × 64 MN], box i from MN coordinate
// mn0 + 64·i, into consecutive 8 KiB slots. 2D map: (mn, k); 3D map: (mn, k, batch).
__device__ __forceinline__ void tma_mn_major_2d(const CUtensorMap* map, uint64_t* full,
                                                uint8_t* dst, int chunks, int mn0, int k0) {
  for (int i = 0; i < chunks; ++i)
    cute::SM90_TMA_LOAD_2D::copy(map, full, kCacheHintNormal, dst + i * kMnChunkBytes,
                                 mn0 + i * kMnChunk, k0);
}
__device__ __forceinline__ void tma_mn_major_3d(const CUtensorMap* map, uint64_t* full,
                                                uint8_t* dst, int chunks, int mn0, int k0,
                                                int batch) {
  for (int i = 0; i < chunks; ++i)
    cute::SM90_TMA_LOAD_3D::copy(map, full, kCacheHintNormal, dst + i * kMnChunkBytes,
                                 mn0 + i * kMnChunk, k0, batch);
}

// Consumer warpgroup `slab`'s A slab (rows 64·slab .. 64·slab + 63 of the tile) in a stage.
template <Major kA>
__device__ __forceinline__ const uint8_t* a_slab(const uint8_t* a_stage, int slab) {
  // K-major: 64 rows × 128 B; MN-major: exactly one 64-wide chunk (config.h static_assert).
  return a_stage + slab * (kA == Major::K ? (kBlockM / 2) * 128 : kMnChunkBytes);
}

// One tile's K loop for consumer warpgroup `slab`. `prepare(stage, kb)` runs after the stage's
// full barrier, before its wgmmas (tail zeroing, proxy fences); it must be uniform per warpgroup.
template <Major kA, Major kB, class Prepare>
__device__ __forceinline__ void consume_tile(float (&acc)[128], int k_blocks,
                                             const SharedLayout& smem, PipelineState& pipe,
                                             int slab, Prepare&& prepare) {
#pragma unroll
  for (int i = 0; i < 128; ++i) acc[i] = 0.0f;
  fence_accumulators(acc);
  int previous_stage = -1;
  for (int kb = 0; kb < k_blocks; ++kb) {
    ClusterBarrier::wait(&smem.full[pipe.stage], pipe.phase);
    prepare(pipe.stage, kb);
    const uint64_t desc_a = OperandDesc<kA>::make(a_slab<kA>(smem.a_stage(pipe.stage), slab));
    const uint64_t desc_b = OperandDesc<kB>::make(smem.b_stage(pipe.stage));
    cute::warpgroup_arrive();
#pragma unroll
    for (int k = 0; k < kBlockK / kWgmmaK; ++k) {
      wgmma_m64n256k16<kA, kB>(desc_a + OperandDesc<kA>::kStep * k,
                               desc_b + OperandDesc<kB>::kStep * k, acc,
                               std::make_index_sequence<128>{});
    }
    cute::warpgroup_commit_batch();
    cute::warpgroup_wait<1>();
    fence_accumulators(acc);
    if (previous_stage >= 0) ClusterBarrier::arrive(&smem.empty[previous_stage]);
    previous_stage = pipe.stage;
    pipe.advance();
  }
  cute::warpgroup_wait<0>();
  fence_accumulators(acc);
  if (previous_stage >= 0) ClusterBarrier::arrive(&smem.empty[previous_stage]);
}

// Accumulator position of thread `t` (of its warpgroup): acc[4j + 2h + i] is row
// 16·warp + lane/4 + 8h, column 8j + 2·(lane % 4) + i of the 64 × 256 slab.
struct AccPosition {
  int row;  // of h = 0 within the slab
  int col;  // of j = 0, i = 0
  __device__ static AccPosition of_thread() {
    const int lane = threadIdx.x % 32, warp = (threadIdx.x / 32) % 4;
    return AccPosition{.row = 16 * warp + lane / 4, .col = 2 * (lane % 4)};
  }
};

}  // namespace moefuse::gemm::bwd
