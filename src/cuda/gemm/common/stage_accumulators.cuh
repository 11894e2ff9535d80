// The forward kernels' consumer side of the epilogue hand-off (common/tile_handoff.cuh): a
// consumer warpgroup's 64 rows × kCols columns of fp32 accumulators, plus the bias, rounded to
// bf16 into the tile buffer (row pitch kPitch bytes) at (first_row, first_col) for the epilogue
// warps: rows 64·slab of a full tile, or columns 128·slab of a half tile (mainloop.cuh). Shared
// by the BF16 kernel (kCols 256) and the FP8 kernel (kCols 128), whose epilogue warps both drain
// the buffer with epilogues/drain_staged_tile.cuh; the backward's staging
// (backward/tile_handoff.cuh) has no bias and stages fp32 in parts.
//
// Accumulator layout (wgmma m64nN f32): acc[4j + 2h + i] is row 16w + l/4 + 8h, column
// 8j + 2(l % 4) + i of the slab (w warp of the warpgroup, l lane).
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

#include "cuda/gemm/epilogues/bias_pair.cuh"
#include "cuda/packed_values.cuh"

namespace moefuse::gemm {

// acc: the first kCols / 2 registers are staged. bias: the expert's [n] fp32 row, or null;
// columns at or past n get no bias (their values are never stored by the epilogue warps). n0:
// the tile's first column in D.
template <int kCols, int kPitch, int kAcc>
__device__ __forceinline__ void stage_accumulators(const float (&acc)[kAcc], uint8_t* tile,
                                                   int first_row, int first_col,
                                                   const float* bias, int n0, int n) {
  static_assert(kAcc >= kCols / 2, "a wgmma m64nN tile holds N / 2 accumulators per thread");
  const int lane = threadIdx.x % 32, warp = (threadIdx.x / 32) % 4;
  const int pair_col = first_col + 2 * (lane % 4);
  uint8_t* row0 = tile + (first_row + 16 * warp + lane / 4) * kPitch;
#pragma unroll
  for (int j = 0; j < kCols / 8; ++j) {
    const float2 b = bias_pair(bias, n0 + 8 * j + pair_col, n);
#pragma unroll
    for (int h = 0; h < 2; ++h)
      cuda::store_pair(
          reinterpret_cast<__nv_bfloat16*>(row0 + 8 * h * kPitch + (8 * j + pair_col) * 2),
          acc[4 * j + 2 * h] + b.x, acc[4 * j + 2 * h + 1] + b.y);
  }
}

}  // namespace moefuse::gemm
