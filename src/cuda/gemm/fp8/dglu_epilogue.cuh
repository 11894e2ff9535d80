// The FP8 kernel's third epilogue kind: the FC2 dgrad's dGLU, from registers (the FP8 twin of the
// BF16 dgrad's backward/dgrad_epilogue.cuh, with the same contract, bwd::DGluEpilogue):
//   g = the promoted fp32 accumulator, n = F;  with p = row_scale[r] (1 when absent)
//   d_pre = act'(pre) ⊙ (p·g)   bf16, pre's interleaved column order
//   scaled_act = p·act(pre)      bf16 [M_cap, F] (optional)
//   dp_partial[r, n_block] = Σ_{f in the tile} g·act   (optional; dp_reduce adds the blocks)
// The per-activation math is activation_backward.h's (activation_grad_op), as in the BF16 kernel.
//
// Unlike the BF16 kernel (whose epilogue warps receive g as bf16 through shared memory), g here
// stays fp32: the consumers finish their own rows, so d_pre and dp carry one rounding fewer.
//
// Accumulator layout (mainloop.cuh): acc[4j + 2h + i] is row 16·warp + lane/4 + 8h of the slab,
// F column f = n0 + 8j + 2·(lane % 4) + i. With the GLU interleave of 8, the gate of f sits at
// pre column 16·(f / 8) + f % 8 = 2·n0 + 16j + 2·(lane % 4) + i and its up 8 columns later;
// squared ReLU: pre column f. A thread reads and writes column pairs (4-byte bf16x2); a quad of
// lanes covers 16 contiguous bytes of a row.
// dp: each thread sums its 32 products of a row, the quad (lanes sharing lane / 4, hence the row)
// adds them with two xor-shuffles in a fixed order, lane % 4 == 0 stores: deterministic.
// Rows at or past row_end and columns at or past n are neither read nor written.
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

#include "cuda/gemm/backward/activation_backward.h"
#include "cuda/gemm/backward/params.h"
#include "cuda/gemm/fp8/config.h"
#include "cuda/gemm/fp8/params.h"
#include "cuda/packed_values.cuh"

namespace moefuse::gemm::fp8 {

__device__ __forceinline__ float2 load_bf16_pair(const __nv_bfloat16* p) {
  return __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(p));
}

__device__ __forceinline__ void store_bf16_pair(__nv_bfloat16* p, float a, float b) {
  *reinterpret_cast<__nv_bfloat162*>(p) = __floats2bfloat162_rn(a, b);
}

template <EpilogueOp kOp>
__device__ __forceinline__ void dglu_tile_op(const float (&acc)[kAccumulators],
                                             const Fp8GemmProblem& p, const bwd::DGluEpilogue& ep,
                                             int slab_first, int row_end, int n0, int n_block) {
  constexpr bool kGlu = is_glu_op(kOp);
  const int lane = threadIdx.x % 32, warp = (threadIdx.x / 32) % 4;
  const int pair_col = 2 * (lane % 4);
  const int pre_cols = kGlu ? 2 * p.n : p.n;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int row = slab_first + 16 * warp + lane / 4 + 8 * h;
    const bool row_ok = row < row_end;  // uniform over the quad
    float dp = 0.0f;
    if (row_ok) {
      const float scale = ep.row_scale ? __ldg(ep.row_scale + row) : 1.0f;
      const __nv_bfloat16* pre = ep.pre + static_cast<int64_t>(row) * pre_cols;
      __nv_bfloat16* d_pre = ep.d_pre + static_cast<int64_t>(row) * pre_cols;
#pragma unroll
      for (int j = 0; j < kBlockN / 8; ++j) {
        const int f = n0 + 8 * j + pair_col;
        if (n0 + 8 * j >= p.n) break;  // n % 8 == 0: the octet is entirely in or out
        const int gate_col = kGlu ? 2 * n0 + 16 * j + pair_col : f;
        const float2 gate = load_bf16_pair(pre + gate_col);
        const float2 up = kGlu ? load_bf16_pair(pre + gate_col + 8) : make_float2(0.0f, 0.0f);
        const float* g = &acc[4 * j + 2 * h];
        const bwd::ActivationGrad a0 = bwd::activation_grad_op<kOp>(ep.act, gate.x, up.x);
        const bwd::ActivationGrad a1 = bwd::activation_grad_op<kOp>(ep.act, gate.y, up.y);
        dp = fmaf(g[0], a0.value, dp);
        dp = fmaf(g[1], a1.value, dp);
        const float d0 = scale * g[0], d1 = scale * g[1];
        store_bf16_pair(d_pre + gate_col, d0 * a0.d_gate, d1 * a1.d_gate);
        if constexpr (kGlu) store_bf16_pair(d_pre + gate_col + 8, d0 * a0.d_up, d1 * a1.d_up);
        if (ep.scaled_act)
          store_bf16_pair(ep.scaled_act + static_cast<int64_t>(row) * p.n + f, scale * a0.value,
                          scale * a1.value);
      }
    }
    // Every lane of the warp reaches the shuffles (rows past the end contribute 0, unused).
    dp += __shfl_xor_sync(0xffffffffu, dp, 1);
    dp += __shfl_xor_sync(0xffffffffu, dp, 2);
    if (ep.dp_partial && row_ok && lane % 4 == 0)
      ep.dp_partial[static_cast<int64_t>(row) * ep.dp_stride + n_block] = dp;
  }
}

// One switch on the activation outside the unrolled loop (activation_backward.h says why).
__device__ __forceinline__ void dglu_tile(const float (&acc)[kAccumulators],
                                          const Fp8GemmProblem& p, const bwd::DGluEpilogue& ep,
                                          int slab_first, int row_end, int n0, int n_block) {
  dispatch_epilogue_op(ep.act.op, [&](auto op) {
    dglu_tile_op<decltype(op)::value>(acc, p, ep, slab_first, row_end, n0, n_block);
  });
}

}  // namespace moefuse::gemm::fp8
