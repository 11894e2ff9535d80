// The gather wgrad's in-consumer epilogue (its producer needs all of warpgroup 0, so it has no
// epilogue warps for tile_handoff.cuh): global stores through a per-warpgroup staging buffer, so
// that global memory sees whole 128-byte row segments written 16 bytes per thread instead of the
// accumulator layout's 4- or 8-byte pieces of 8 rows per warp store. The geometry (64-row slab,
// 128-byte chunks, row pitch by the staged type: stage_pitch) and the
// protocol are the forward's (cuda/gemm/epilogues/staged_store.cuh):
//   1. each thread writes its values into the buffer,  2. named barrier of the warpgroup,
//   3. the 128 threads copy 64 rows × 128 bytes out (rows ≥ row_end and bytes ≥ row_bytes
//      skipped),  4. named barrier again before the buffer is reused.
// Differences: the barrier ids (1 is the wgrad's 256-thread barrier here, so slabs use 2 and 3)
// and a combine step in 3, so that the wgrad's accumulate reads the old D with 16-byte loads too.
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

// Step 3 for staged 16-byte piece `v` going to `dst`: plain copy.
struct CopyPiece {
  __device__ void operator()(uint8_t* dst, const uint4& v) const {
    *reinterpret_cast<uint4*>(dst) = v;
  }
};
// Step 3 for fp32 data: dst += v (the wgrad's accumulate).
struct AddPieceF32 {
  __device__ void operator()(uint8_t* dst, const uint4& v) const {
    *reinterpret_cast<uint4*>(dst) = cuda::add_f32x4(*reinterpret_cast<const uint4*>(dst), v);
  }
};

// Steps 2-4: staged rows [0, 64) (`pitch` bytes apart) → dst row row_first + r (< row_end),
// bytes [byte_first, byte_first + 128) of each row clipped to row_bytes (a multiple of 16).
template <class Combine = CopyPiece>
__device__ __forceinline__ void flush_slab(const uint8_t* stage, int pitch, int slab,
                                           uint8_t* dst, int64_t row_pitch_bytes, int row_first,
                                           int row_end, int byte_first, int row_bytes,
                                           Combine combine = {}) {
  constexpr int kPiecesPerRow = kStageChunkBytes / 16;
  slab_barrier(slab);
  const int tid = threadIdx.x % kWarpgroupThreads;
#pragma unroll
  for (int round = 0; round < gemm::kStageRows * kPiecesPerRow / kWarpgroupThreads; ++round) {
    const int id = round * kWarpgroupThreads + tid;
    const int r = id / kPiecesPerRow, piece = id % kPiecesPerRow;
    const int row = row_first + r, byte = byte_first + piece * 16;
    if (row < row_end && byte < row_bytes)
      combine(dst + row * row_pitch_bytes + byte,
              *reinterpret_cast<const uint4*>(stage + r * pitch + piece * 16));
  }
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
