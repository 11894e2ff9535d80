// FP8 data gradients of the expert MLPs (DeepSeek-V3 recipe, Hopper sm_90a).
//
// FP8 wgmma takes both operands K-major (docs/fp8.md), so a dgrad is the forward FP8 grouped GEMM
// (moefuse/grouped_gemm_fp8.h, D = A·Bᵀ with B [E, N, K]) run on transposed weights:
//   FC1 dgrad  dxs = d_pre · W1[e]   = grouped_gemm_fp8(a = d_pre, b = W1ᵀ [E, H, fc1])   (kLinear)
//   FC2 dgrad  g   = dys · W2[e]     = the same kernel with b = W2ᵀ [E, F, H] and the dGLU
//              epilogue: grouped_gemm_fc2_dgrad_fp8 below.
// The transposed weights need no requantisation: the 128×128 blocks of Wᵀ are the transposes of
// W's blocks, so Wᵀ's codes are W's codes transposed and its scales [E, K/128, N/128] are W's
// scales [E, N/128, K/128] transposed (transpose_fp8_blockwise_weights, bit-exact).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "moefuse/config.h"
#include "moefuse/grouped_gemm_fp8.h"
#include "moefuse/tensor.h"

namespace moefuse {

// w [E, N, K] e4m3 with its 128×128 block scales w_scales [E, ceil(N/128), ceil(K/128)] fp32
// → wt [E, K, N] e4m3 (wt[e, k, n] = w[e, n, k]) and wt_scales [E, ceil(K/128), ceil(N/128)]
// (wt_scales[e, j, i] = w_scales[e, i, j]). Requirements (InvalidArgument names the argument):
// N and K > 0, multiples of 16 (both become a GEMM's K: TMA's 16-byte rows), below 2^31;
// 1 <= E; contiguous 16-byte-aligned device tensors; wt must not overlap w. Asynchronous,
// CUDA-graph safe.
void transpose_fp8_blockwise_weights(const TensorView& w, const TensorView& w_scales,
                                     const TensorView& wt, const TensorView& wt_scales,
                                     cudaStream_t stream);

// The checks of transpose_fp8_blockwise_weights with every tensor on `device`. No CUDA call.
void validate_transpose_fp8_blockwise_weights(const TensorView& w, const TensorView& w_scales,
                                              const TensorView& wt, const TensorView& wt_scales,
                                              Device device = Device::kCuda);

// ---- FC2 dgrad fused with the activation backward and the routing-prob gradient ------------
// The FP8 twin of moefuse::grouped_gemm_fc2_dgrad (grouped_gemm_backward.h), same outputs:
//   g[r]     = deq(dys)[r] · deq(w2t)[e]ᵀ                  fp32 sums, rounded to bf16, not stored
//   d_pre[r] = activation'(pre[r]) ⊙ (p[r] · g[r])         bf16, pre's interleaved order
//   scaled_act[r] = p[r] · activation(pre[r])              bf16 (optional)
//   d_row_scale[r] = ⟨g[r], act[r]⟩ + ⟨dys_bf16[r], b2[e]⟩  fp32 (optional)
// p = row_scale (1 when absent). g enters d_pre and d_row_scale rounded to bf16, as in the BF16
// kernel (and in torch, whose g is a bf16 tensor).
struct Fc2DgradFp8Args {
  TensorView dys;         // [M_cap, H] e4m3, 1x128 groups along H
  TensorView dys_scales;  // [ceil(H/128), fp8_scale_rows(M_cap)] fp32, K-major
  TensorView w2t;         // [E, F, H] e4m3: W2 transposed (transpose_fp8_blockwise_weights)
  TensorView w2t_scales;  // [E, ceil(F/128), ceil(H/128)] fp32
  TensorView offsets;     // [E+1] int32
  TensorView pre;         // [M_cap, fc1] bf16: the forward's pre-activation (with b1)
  TensorView d_pre;       // [M_cap, fc1] bf16 out
  Activation activation = Activation::kSwiGLU;
  ClampedSwiGLUParams clamped_swiglu{};

  // Optional (empty view = absent).
  TensorView row_scale;    // [M_cap] fp32 p
  TensorView scaled_act;   // [M_cap, F] bf16 out: p·act (the FC2 wgrad's operand)
  TensorView d_row_scale;  // [M_cap] fp32 out: dp (needs the dp_partial scratch)
  TensorView b2;           // [E, H] fp32: adds ⟨dys_bf16[r], b2[e]⟩ to dp (d_row_scale only)
  TensorView dys_bf16;     // [M_cap, H] bf16: dys before quantisation, required iff b2
};

// dp partial sums per (row, 128-column block of F): the scratch is [M_cap, this] fp32.
int64_t fc2_dgrad_fp8_dp_blocks(int64_t ffn);

// The FP8 kernel with the dGLU epilogue, then (with d_row_scale) the BF16 path's dp reduction.
// dp_partial: [M_cap, fc2_dgrad_fp8_dp_blocks(F)] fp32 scratch, required iff d_row_scale is set.
// Requirements as grouped_gemm_fp8 (H % 16 == 0; F % 8 == 0, fc1 = 2F for GLU) plus the shapes
// above; contiguous, 16-byte-aligned device tensors. Asynchronous, CUDA-graph safe,
// deterministic.
void grouped_gemm_fc2_dgrad_fp8(const Fc2DgradFp8Args& args, const TensorView& dp_partial,
                                cudaStream_t stream);

// The checks of grouped_gemm_fc2_dgrad_fp8 (without the scratch) with every tensor on `device`.
void validate_fc2_dgrad_fp8(const Fc2DgradFp8Args& args, Device device = Device::kCuda);

}  // namespace moefuse
