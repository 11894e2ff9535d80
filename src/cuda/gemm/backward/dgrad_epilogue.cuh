// The dgrad kernel's epilogues, straight from the wgmma accumulators (layout: AccPosition in
// mainloop.cuh) to global memory.
//
// store_tile: D = acc (bf16 or fp32).
// dglu_tile (FC2 dgrad): the accumulator is g = dys·W2[e] for output columns f of F. For the GLU
// activations the saved pre holds gate f at interleaved column 16·(f/8) + f%8 and up f 8 columns
// later; a thread's column pair (f, f+1) starts at f%8 = 2·(lane%4), so both halves are 4-byte
// pairs: gcol = 2·(f - f%8) + f%8. Squared ReLU reads pre column f. dp: each thread sums g·act
// over its 64 columns of the row in a fixed order, a quad shuffle (xor 1, 2) sums the 4 lanes
// sharing the row, and lane%4 == 0 stores the (row, n-block) partial: deterministic.
// Rows at or past the expert's end and columns at or past n are not written (n % 8 == 0, so a
// column pair is entirely in or out).
#pragma once

#include <cuda_bf16.h>

#include "cuda/gemm/backward/activation_backward.h"
#include "cuda/gemm/backward/mainloop.cuh"
#include "cuda/gemm/backward/params.h"

namespace moefuse::gemm::bwd {

template <class OutT>
__device__ __forceinline__ void store_tile(const float (&acc)[128], OutT* d, int ld, int n,
                                           int row_first, int row_end, int n0) {
  const AccPosition pos = AccPosition::of_thread();
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int row = row_first + pos.row + 8 * h;
    if (row >= row_end) continue;
    OutT* d_row = d + static_cast<int64_t>(row) * ld;
#pragma unroll
    for (int j = 0; j < kBlockN / 8; ++j) {
      const int col = n0 + 8 * j + pos.col;
      if (col < n) store_pair(d_row + col, acc[4 * j + 2 * h], acc[4 * j + 2 * h + 1]);
    }
  }
}

__device__ __forceinline__ void dglu_tile(const float (&acc)[128], const DgradProblem& p,
                                          const DGluEpilogue& ep, int row_first, int row_end,
                                          int n0, int n_block) {
  const AccPosition pos = AccPosition::of_thread();
  const bool glu = is_glu_op(ep.act.op);
  const int pre_cols = glu ? 2 * p.n : p.n;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int row = row_first + pos.row + 8 * h;
    const bool valid = row < row_end;
    float dp = 0.0f;
    if (valid) {
      const float scale = ep.row_scale ? __ldg(ep.row_scale + row) : 1.0f;
      const __nv_bfloat16* pre = ep.pre + static_cast<int64_t>(row) * pre_cols;
      __nv_bfloat16* d_pre = ep.d_pre + static_cast<int64_t>(row) * pre_cols;
      __nv_bfloat16* act =
          ep.scaled_act ? ep.scaled_act + static_cast<int64_t>(row) * p.n : nullptr;
#pragma unroll
      for (int j = 0; j < kBlockN / 8; ++j) {
        const int f = n0 + 8 * j + pos.col;
        if (f >= p.n) continue;
        const int gcol = glu ? 2 * (n0 + 8 * j) + pos.col : f;
        const float2 gate = load_pair(pre + gcol);
        const float2 up = glu ? load_pair(pre + gcol + 8) : make_float2(0.0f, 0.0f);
        const ActivationGrad a0 = activation_grad(ep.act, gate.x, up.x);
        const ActivationGrad a1 = activation_grad(ep.act, gate.y, up.y);
        const float g0 = acc[4 * j + 2 * h], g1 = acc[4 * j + 2 * h + 1];
        dp = fmaf(g0, a0.value, dp);
        dp = fmaf(g1, a1.value, dp);
        const float da0 = scale * g0, da1 = scale * g1;
        store_pair(d_pre + gcol, da0 * a0.d_gate, da1 * a1.d_gate);
        if (glu) store_pair(d_pre + gcol + 8, da0 * a0.d_up, da1 * a1.d_up);
        if (act) store_pair(act + f, scale * a0.value, scale * a1.value);
      }
    }
    // Every lane takes part in the shuffles (rows past the end contribute unused zeros).
    dp += __shfl_xor_sync(0xffffffffu, dp, 1);
    dp += __shfl_xor_sync(0xffffffffu, dp, 2);
    if (valid && ep.dp_partial && threadIdx.x % 4 == 0)
      ep.dp_partial[static_cast<int64_t>(row) * ep.dp_blocks + n_block] = dp;
  }
}

}  // namespace moefuse::gemm::bwd
