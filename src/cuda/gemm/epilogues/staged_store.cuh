// Stores a consumer warpgroup's results through a small shared-memory staging buffer so that global
// memory sees whole 128-byte row segments, 16 bytes per thread.
//
// Why: the wgmma accumulator layout gives each thread 2 adjacent columns of 8 different rows, so
// storing straight from registers makes every warp store touch 8 rows with 16 bytes each. Measured
// on the H200 (docs/measurements.md, 2026-11-29) that epilogue took longer than the mainloop itself
// (deepseek-v3 FC2: 3.0 ms mainloop, 6.8 ms with the direct-store epilogue).
//
// Protocol, per 128-byte column chunk of the warpgroup's 64-row slab:
//   1. every thread writes its values into the staging buffer (4- or 8-byte stores; the row pitch,
//      stage_pitch below, spreads the rows a store touches over all 32 banks),
//   2. named barrier over the warpgroup's 128 threads,
//   3. the 128 threads copy 64 rows × 128 bytes to global memory, 16 bytes each, 4 rounds, rows at
//      or past the expert's end and chunks at or past the row's width skipped,
//   4. named barrier again before the next chunk reuses the buffer.
#pragma once

#include <cstdint>

#include "cuda/gemm/common/smem_descriptor.cuh"
#include "cuda/gemm/config.h"
#include "cuda/packed_values.cuh"

namespace moefuse::gemm {

inline constexpr int kStageRows = kBlockM / kConsumerWarpgroups;  // 64: one warpgroup's slab
inline constexpr int kStageChunkBytes = 128;                      // one row segment per chunk
// The buffer's row pitch for pairs of T. A bf16 pair is one 4-byte store, and a warp's store
// covers rows 0-7 with 16 bytes each: rows 16 bytes apart modulo 128 put them on 8 distinct
// 4-bank groups (144). An fp32 pair is an 8-byte store, issued by half-warps that cover rows 0-3
// with 32 bytes each: those need rows 32 bytes apart (160); at 144 two rows share 4 banks (the
// 6-8% excess wavefronts ncu counted in the fp32 wgrads, run 17).
template <class T>
constexpr int stage_pitch() {
  static_assert(sizeof(T) == 2 || sizeof(T) == 4);
  return kStageChunkBytes + (sizeof(T) == 4 ? 32 : 16);
}
inline constexpr int kStageBytes = kStageRows * stage_pitch<float>();  // the larger pitch
static_assert(kStageBytes == kEpilogueStageBytes, "config.h's shared-memory budget");

// Step 1: a column pair as T at (slab row `row`, byte `byte` of the chunk) of the buffer.
template <class T>
__device__ __forceinline__ void stage_pair(uint8_t* stage, int row, int byte, float v0, float v1) {
  assume_shared(stage);
  cuda::store_pair(reinterpret_cast<T*>(stage + row * stage_pitch<T>() + byte), v0, v1);
}

// Named barrier 1 + slab (barrier 0 is __syncthreads) over one consumer warpgroup.
__device__ __forceinline__ void warpgroup_barrier(int slab) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(1 + slab), "n"(kWarpgroupThreads) : "memory");
}

// Step 3: staged rows [0, 64) (`pitch` bytes apart: the staged type's stage_pitch) → dst rows
// row_first + r (those < row_end), bytes [byte_first, byte_first + 128) of each row, clipped to
// row_bytes (a multiple of 16), 16 bytes a thread and round.
__device__ __forceinline__ void flush_stage(const uint8_t* stage, int pitch, uint8_t* dst,
                                            int64_t row_pitch_bytes, int row_first, int row_end,
                                            int byte_first, int row_bytes) {
  constexpr int kChunksPerRow = kStageChunkBytes / 16;
  const int tid = threadIdx.x % kWarpgroupThreads;
#pragma unroll
  for (int round = 0; round < kStageRows * kChunksPerRow / kWarpgroupThreads; ++round) {
    const int id = round * kWarpgroupThreads + tid;
    const int r = id / kChunksPerRow, byte = byte_first + (id % kChunksPerRow) * 16;
    const int row = row_first + r;
    if (row < row_end && byte < row_bytes)
      *reinterpret_cast<uint4*>(dst + row * row_pitch_bytes + byte) =
          *reinterpret_cast<const uint4*>(stage + r * pitch + (id % kChunksPerRow) * 16);
  }
}

}  // namespace moefuse::gemm
