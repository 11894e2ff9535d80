// The gather wgrad's in-consumer epilogue (its producer needs all of warpgroup 0, so it has no
// epilogue warps for tile_handoff.cuh): global stores through a per-warpgroup staging buffer, so
// that global memory sees whole 128-byte row segments written 16 bytes per thread instead of the
// accumulator layout's 4- or 8-byte pieces of 8 rows per warp store. The geometry (64-row slab,
// 128-byte chunks, row pitch by the staged type: stage_pitch) and the
// protocol are the forward's (cuda/gemm/epilogues/staged_store.cuh):
//   1. each thread writes its values into the buffer,  2. named barrier of the warpgroup,
//   3. the 128 threads copy 64 rows × 128 bytes out (rows ≥ row_end and bytes ≥ row_bytes
//      skipped),  4. named barrier again before the buffer is reused.
// One difference: the barrier ids (1 is the wgrad's 256-thread barrier here, so slabs use 2 and
// 3). Step 3 is the forward's flush_stage, with AddPieceF32 for the wgrad's accumulate (the old
// D read with 16-byte loads too).
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

#include "cuda/gemm/backward/config.h"
#include "cuda/gemm/backward/mainloop.cuh"
#include "cuda/gemm/epilogues/staged_store.cuh"

namespace moefuse::gemm::bwd {

static_assert(gemm::kStageRows == kBlockM / kConsumerWarpgroups &&
                  gemm::kStageBytes == kEpilogueStageBytes,
              "one staging buffer holds exactly a consumer warpgroup's slab");

__device__ __forceinline__ void slab_barrier(int slab) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(kSlabBarrierFirstId + slab), "n"(kWarpgroupThreads)
               : "memory");
}

// Steps 2-4: the forward's flush_stage between the slab's named barriers.
template <class Combine = CopyPiece>
__device__ __forceinline__ void flush_slab(const uint8_t* stage, int pitch, int slab,
                                           uint8_t* dst, int64_t row_pitch_bytes, int row_first,
                                           int row_end, int byte_first, int row_bytes,
                                           Combine combine = {}) {
  slab_barrier(slab);
  flush_stage(stage, pitch, dst, row_pitch_bytes, row_first, row_end, byte_first, row_bytes,
              combine);
  slab_barrier(slab);
}

// A 64 × 256 accumulator slab → D rows [row_first, row_end) (row pitch `ld` elements, `n` valid
// columns, tile columns from n0), one 128-byte chunk at a time (64 bf16 or 32 fp32 columns).
template <class OutT, class Combine = CopyPiece>
__device__ __forceinline__ void store_slab(const float (&acc)[128], uint8_t* stage, int slab,
                                           OutT* d, int64_t ld, int n, int row_first,
                                           int row_end, int n0, Combine combine = {}) {
  constexpr int kJPerChunk = kStageChunkBytes / int{sizeof(OutT)} / 8;
  const AccPosition pos = AccPosition::of_thread();
#pragma unroll
  for (int c = 0; c < kBlockN / 8 / kJPerChunk; ++c) {
#pragma unroll
    for (int jj = 0; jj < kJPerChunk; ++jj) {
      const int j = c * kJPerChunk + jj;
#pragma unroll
      for (int h = 0; h < 2; ++h)
        stage_pair<OutT>(stage, pos.row + 8 * h, (8 * jj + pos.col) * int{sizeof(OutT)},
                         acc[4 * j + 2 * h], acc[4 * j + 2 * h + 1]);
    }
    flush_slab(stage, stage_pitch<OutT>(), slab, reinterpret_cast<uint8_t*>(d),
               ld * int64_t{sizeof(OutT)}, row_first, row_end,
               (n0 + 8 * kJPerChunk * c) * int{sizeof(OutT)}, n * int{sizeof(OutT)}, combine);
  }
}

}  // namespace moefuse::gemm::bwd
