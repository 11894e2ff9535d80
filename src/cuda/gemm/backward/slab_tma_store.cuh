// The gather wgrad's epilogue (its producer needs all of warpgroup 0, so it has no epilogue
// warps for tile_handoff.cuh): in the consumers and asynchronous, as CUTLASS's TMA-store
// epilogue. A consumer warpgroup's 64 × 256 accumulator slab leaves as sub-tiles of 64 rows ×
// 128 bytes (32 fp32 or 64 bf16 columns): each is written into one of the warpgroup's two 8 KiB
// buffers and sent by one TMA store — with accumulate, one TMA reduce-add, which adds it to the
// old D in L2 without the SM reading it — while the next is written into the other buffer. The
// consumers wait only until the TMA engine has read a buffer, never for global memory, and the
// buffers are small enough for a fourth stage (config.h GatherWgradStages).
//
// Per sub-tile c (buffer c % 2), per consumer warpgroup:
//   1. every thread writes its accumulator pairs (8-byte fp32 or 4-byte bf16 stores) where the
//      128B-swizzled TMA box expects them: 16-byte chunk q of row r at r·128 + (q ^ r % 8)·16,
//      which also spreads a warp's 8 rows over all 32 banks (2 wavefronts for 256 bytes of fp32,
//      1 for 128 of bf16);
//   2. fence.proxy.async (the generic-proxy writes become visible to the TMA engine), named
//      barrier of the warpgroup;
//   3. its thread 0 issues the store of the buffer to D[e] at (row0, col0 + c·W) — TMA clips
//      rows past m_out and columns past n_out —, commits it as a bulk group and waits until at
//      most this group is still reading shared memory, so the other buffer is free;
//   4. named barrier: every thread may write the other buffer.
// Across tiles buffer 0 is free when a slab starts: the sub-tile count is even, so the last one
// used buffer 1, and its step 3 waited for the one before it. wait_slab_stores ends the kernel.
#pragma once

#include <cuda.h>
#include <cuda_bf16.h>

#include <cute/arch/copy_sm90_tma.hpp>

#include <cstdint>

#include "cuda/gemm/backward/config.h"
#include "cuda/gemm/backward/mainloop.cuh"
#include "cuda/gemm/common/smem_descriptor.cuh"
#include "cuda/packed_values.cuh"

namespace moefuse::gemm::bwd {

__device__ __forceinline__ void slab_barrier(int slab) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(kSlabBarrierFirstId + slab), "n"(kWarpgroupThreads)
               : "memory");
}

// Sub-tile c of the slab (OutT: D's element), c < kCount; kReduce adds to D (fp32 only).
template <class OutT, bool kReduce>
__device__ __forceinline__ void store_slab_tma(const float (&acc)[128], uint8_t* buffers,
                                               const CUtensorMap* map, int slab, int expert,
                                               int row0, int col0) {
  static_assert(!kReduce || sizeof(OutT) == 4, "the reduce-add is the fp32 accumulate");
  constexpr int kCols = kSlabSubTileRowBytes / int{sizeof(OutT)};  // 32 fp32 or 64 bf16
  constexpr int kCount = kBlockN / kCols;
  constexpr int kJ = kCols / 8;  // accumulator octets (j) a sub-tile holds
  static_assert(kCount % 2 == 0, "the buffer invariant above needs an even sub-tile count");
  const AccPosition pos = AccPosition::of_thread();
  const int swizzle = pos.row % 8;  // the same for h = 0 and 1 (8 rows apart)
  const bool leader = threadIdx.x % kWarpgroupThreads == 0;
#pragma unroll
  for (int c = 0; c < kCount; ++c) {
    uint8_t* buffer = buffers + (c % 2) * kSlabSubTileBytes;
    assume_shared(buffer);
#pragma unroll
    for (int jj = 0; jj < kJ; ++jj) {
      const int byte = (8 * jj + pos.col) * int{sizeof(OutT)};
      const int offset = (((byte / 16) ^ swizzle) * 16) + byte % 16;
      const int j = c * kJ + jj;
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        cuda::store_pair(reinterpret_cast<OutT*>(buffer + (pos.row + 8 * h) * 128 + offset),
                         acc[4 * j + 2 * h], acc[4 * j + 2 * h + 1]);
      }
    }
    cute::tma_store_fence();
    slab_barrier(slab);
    if (leader) {
      if constexpr (kReduce) {
        cute::SM90_TMA_REDUCE_ADD_3D::copy(map, buffer, col0 + c * kCols, row0, expert);
      } else {
        cute::SM90_TMA_STORE_3D::copy(map, buffer, col0 + c * kCols, row0, expert);
      }
      cute::tma_store_arrive();
      cute::tma_store_wait<1>();
    }
    slab_barrier(slab);
  }
}

// Before the kernel exits: the leader's stores have read their buffers and reached global memory.
__device__ __forceinline__ void wait_slab_stores() {
  if (threadIdx.x % kWarpgroupThreads == 0)
    asm volatile("cp.async.bulk.wait_group 0;\n" ::: "memory");
}

}  // namespace moefuse::gemm::bwd
