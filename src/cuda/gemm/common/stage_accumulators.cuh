// The forward kernels' consumer side of the epilogue hand-off (common/tile_handoff.cuh): a
// consumer warpgroup's 64 rows of fp32 accumulators, plus the bias, rounded to bf16 into the tile
// buffer (row pitch kPitch bytes) for the epilogue warps. Shared by the BF16 kernel (kCols 256)
// and the FP8 kernel (kCols 128), whose epilogue warps both drain the buffer through
// epilogues/staged_tile.cuh; the backward's staging (backward/tile_handoff.cuh) has no bias and
// stages fp32 in parts.
//
// Accumulator layout (wgmma m64nN f32): acc[4j + 2h + i] is row 16w + l/4 + 8h, column
// 8j + 2(l % 4) + i of the slab (w warp of the warpgroup, l lane).
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

#include "cuda/gemm/common/smem_descriptor.cuh"
#include "cuda/gemm/epilogues/bias_pair.cuh"
#include "cuda/packed_values.cuh"

namespace moefuse::gemm {

// The scales of a consumer thread's two accumulator rows (r0 and r0 + 8 of its slab), 1.0 for
// rows without one.
struct RowScales {
  float v[2] = {1.0f, 1.0f};
};

// The row of the tile a consumer thread's first accumulator row is (the second is 8 below).
template <int kRows>
__device__ __forceinline__ int accumulator_row(int slab) {
  const int lane = threadIdx.x % 32, warp = (threadIdx.x / 32) % 4;
  return slab * (kRows / 2) + 16 * warp + lane / 4;
}

// row_scale: null, or the scales of the tile's rows (row_scale[r] for tile row r < rows, the
// expert's rows in the tile). Loaded before the tile's K loop, so that their latency is not the
// hand-off's (it was, once a tile: session 32's SASS).
template <int kRows>
__device__ __forceinline__ RowScales load_row_scales(const float* row_scale, int slab, int rows) {
  RowScales s;
  if (!row_scale) return s;
  const int r0 = accumulator_row<kRows>(slab);
#pragma unroll
  for (int h = 0; h < 2; ++h)
    if (r0 + 8 * h < rows) s.v[h] = __ldg(row_scale + r0 + 8 * h);
  return s;
}

// bias: the expert's [n] fp32 row, or null; columns at or past n get no bias (their values are
// never stored by the epilogue warps). scale: each row's h + bias is multiplied by it before the
// one rounding (the linear epilogue's row scale, applied here so that the epilogue warps only
// copy: epilogues/staged_tile.cuh).
template <int kRows, int kCols, int kPitch>
__device__ __forceinline__ void stage_accumulators(const float (&acc)[kCols / 2], uint8_t* tile,
                                                   int slab, const float* bias, int n0, int n,
                                                   const RowScales& scale) {
  assume_shared(tile);
  const int lane = threadIdx.x % 32;
  const int pair_col = 2 * (lane % 4);
  const int r0 = accumulator_row<kRows>(slab);
  uint8_t* row0 = tile + r0 * kPitch;
#pragma unroll
  for (int j = 0; j < kCols / 8; ++j) {
    const float2 b = bias_pair(bias, n0 + 8 * j + pair_col, n);
#pragma unroll
    for (int h = 0; h < 2; ++h)
      cuda::store_pair(
          reinterpret_cast<__nv_bfloat16*>(row0 + 8 * h * kPitch + (8 * j + pair_col) * 2),
          (acc[4 * j + 2 * h] + b.x) * scale.v[h],
          (acc[4 * j + 2 * h + 1] + b.y) * scale.v[h]);
  }
}

}  // namespace moefuse::gemm
