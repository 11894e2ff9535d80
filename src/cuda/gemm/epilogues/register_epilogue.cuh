// The fused epilogue, straight from the wgmma accumulators to global memory.
//
// Accumulator layout of wgmma m64nNk16 (f32), thread t of the warpgroup, warp w = t / 32,
// lane l = t % 32: acc[4j + 2h + i] holds row 16w + l/4 + 8h, column 8j + 2(l % 4) + i
// (j < N/8, h, i ∈ {0, 1}). Each thread thus owns column pairs, and with the GLU interleave of
// 8 (gate block 2q, up block 2q + 1 of 8 columns each) the gate and the up value of an output sit
// in the same thread: gate = acc[4·2q + 2h + i], up = acc[4·(2q+1) + 2h + i], output column
// 8q + 2(l % 4) + i of the tile's 128 outputs.
//
// Rows at or past the expert's end (the next expert's rows, or rows past m_cap) are not written.
// Column pairs at or past N are not written (N % 8 == 0, N % 16 == 0 for GLU: a pair or a
// 16-column block is entirely in or entirely out).
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

#include "cuda/gemm/config.h"
#include "cuda/gemm/epilogues/activation.h"
#include "cuda/gemm/params.h"

namespace moefuse::gemm {

__device__ __forceinline__ void store_pair(__nv_bfloat16* dst, float v0, float v1) {
  *reinterpret_cast<__nv_bfloat162*>(dst) = __floats2bfloat162_rn(v0, v1);
}
__device__ __forceinline__ void store_pair(float* dst, float v0, float v1) {
  *reinterpret_cast<float2*>(dst) = make_float2(v0, v1);
}

// row_first: the first row of this warpgroup's 64-row slab; row_end: exclusive; n0: first
// column of h in this tile.
template <class OutT>
__device__ __forceinline__ void epilogue_tile(const float (&acc)[128], const GemmProblem& p,
                                              const EpilogueParams& ep, int expert, int row_first,
                                              int row_end, int n0) {
  const int lane = threadIdx.x % 32;
  const int warp = (threadIdx.x / 32) % 4;
  const int pair_col = 2 * (lane % 4);
  OutT* d = static_cast<OutT*>(p.d);
  const float* bias = ep.bias ? ep.bias + static_cast<int64_t>(expert) * p.n : nullptr;
  const bool glu = is_glu_op(ep.op);
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int row = row_first + 16 * warp + lane / 4 + 8 * h;
    if (row >= row_end) continue;
    const float scale = ep.row_scale ? __ldg(ep.row_scale + row) : 1.0f;
    __nv_bfloat16* pre = ep.pre ? ep.pre + static_cast<int64_t>(row) * p.n : nullptr;
    OutT* d_row = d + static_cast<int64_t>(row) * p.n_out;
    if (glu) {
#pragma unroll
      for (int q = 0; q < kBlockN / 16; ++q) {
        const int col_gate = n0 + 16 * q + pair_col;
        if (col_gate >= p.n) continue;
        float g0 = acc[8 * q + 2 * h], g1 = acc[8 * q + 2 * h + 1];
        float u0 = acc[8 * q + 4 + 2 * h], u1 = acc[8 * q + 4 + 2 * h + 1];
        if (bias) {
          const float2 bg = __ldg(reinterpret_cast<const float2*>(bias + col_gate));
          const float2 bu = __ldg(reinterpret_cast<const float2*>(bias + col_gate + 8));
          g0 += bg.x, g1 += bg.y, u0 += bu.x, u1 += bu.y;
        }
        if (pre) {
          store_pair(pre + col_gate, g0, g1);
          store_pair(pre + col_gate + 8, u0, u1);
        }
        store_pair(d_row + n0 / 2 + 8 * q + pair_col, apply_epilogue_op(ep, g0, u0) * scale,
                   apply_epilogue_op(ep, g1, u1) * scale);
      }
    } else {
#pragma unroll
      for (int j = 0; j < kBlockN / 8; ++j) {
        const int col = n0 + 8 * j + pair_col;
        if (col >= p.n) continue;
        float v0 = acc[4 * j + 2 * h], v1 = acc[4 * j + 2 * h + 1];
        if (bias) {
          const float2 b = __ldg(reinterpret_cast<const float2*>(bias + col));
          v0 += b.x, v1 += b.y;
        }
        if (pre) store_pair(pre + col, v0, v1);
        store_pair(d_row + col, apply_epilogue_op(ep, v0, 0.0f) * scale,
                   apply_epilogue_op(ep, v1, 0.0f) * scale);
      }
    }
  }
}

}  // namespace moefuse::gemm
