// The routed experts' FP8 backward (config.precision kFP8Blockwise, DeepSeek-V3 recipe): the
// bodies of the backward stages that differ from the bf16 ones. MoeLayer::backward
// (backward.cpp) runs them inside its stages, forks and joins; the bias gradients, permute_bwd
// and the router backward are the bf16 path's. Arguments already validated by the
// layer; buffers and their lifetimes in plan.h.
//
// Numerics: every GEMM of the backward runs in FP8 — the FC1 recompute with recompute_pre (from
// x, re-quantised exactly as the forward did: the same codes, so the same pre as the cached one
// the forward's FC1 writes by default), both dgrads (1x128 row-wise activations × the
// 128x128 transposed weights of prepare_fp8_weights) and both wgrads (128x1 column-wise
// groups of one expert's rows on both operands) — but with config.bf16_wgrad, where the wgrads
// are the bf16 layer's (on bf16 dys, p·act, d_pre and permuted x) and this file's wgrad stages
// do not run. The tensors between them (pre, dys, d_pre, p·act, dxs) stay bf16 (dys only where
// the bias terms or a bf16 dW2 read it: the GEMMs' copies are quantised from dy), as do the bias
// gradients' sums and everything of the router. The shared expert follows the same recipe on
// its own stream (shared_expert_fp8.h).
#pragma once

#include <cuda_runtime.h>

#include "cuda/layer/views.h"
#include "moefuse/config.h"
#include "moefuse/layer.h"
#include "moefuse/tensor.h"

namespace moefuse::layer {

// x [rows, K] bf16 → codes [rows, K] e4m3 with 1x128 scales along K, in the FP8 GEMM's K-major
// layout `scales` [ceil(K/128), fp8_scale_rows(rows)]: the quantiser writes row-major
// `scales_rows` [rows, ceil(K/128)], then a transpose (R·K/128 floats, ~1/64 of the codes' bytes).
// The GEMM loads one K group's scales for 128 rows with one TMA box, hence K-major. (d_pre's
// row-wise copy for the FC1 dgrad; the forward's act comes from FC1's E4M3 epilogue instead.)
void quantize_rows_fp8(const TensorView& x, const TensorView& codes, const TensorView& scales_rows,
                       const TensorView& scales, cudaStream_t stream);

// Stage recompute_fc1 (recompute_pre only): x → xs e4m3 + K-major scales (permute_quantize_fp8, the forward's codes)
// → FP8 FC1 GEMM, linear epilogue with b1 → pre_bwd bf16 [R, fc1].
void recompute_pre_fp8(const TensorView& x, const MoeLayerWeights& w, const Views& v,
                       const TensorView& health, cudaStream_t stream);

// Stage combine_bwd: dys[row] = dy[token_of_row[row]] (backward.cpp), made in the form its
// readers take: e4m3 row-wise codes and K-major scales for the FC2 dgrad, quantised from dy by
// the forward's permute + quantise (each dy row read once and quantised once for its k rows;
// the codes are those of quantising the permuted bf16 copy), and that bf16 copy itself only with
// expert bias (the dp and d_b2 bias terms read it) or config.bf16_wgrad (dW2 reads it). dW2's
// column-wise copy gathers dy too (fc2_wgrad_fp8).
void combine_backward_fp8(const MoeConfig& config, const TensorView& dy, const Views& v,
                          const TensorView& health, cudaStream_t stream);

// Stage fc2_dgrad: FP8 FC2 dgrad (dys codes × W2ᵀ) with the dGLU + dp epilogue → d_pre, p·act
// (act_bwd), dp (d_row_prob; + ⟨dys, b2⟩ with expert bias).
void fc2_dgrad_fp8(const MoeConfig& config, const MoeLayerWeights& w, const Views& v,
                   cudaStream_t stream);

// Stage fc1_dgrad: d_pre → e4m3 row-wise → FP8 GEMM on W1ᵀ → dxs bf16 [R, H]. With FP8 wgrads
// (v.dpre_t) the same pass over d_pre writes its column-wise copy for fc1_wgrad_fp8 too.
void fc1_dgrad_fp8(const Views& v, cudaStream_t stream);

// Stage fc2_wgrad (MoeLayer: main stream; EpMoeLayer: second stream): dys (gathered from dy by
// token_of_row) and p·act column-wise → d_w2 = Σ dysᵀ·(p·act).
void fc2_wgrad_fp8(const TensorView& dy, const MoeLayerGrads& g, const Views& v,
                   cudaStream_t stream);

// Stage fc1_wgrad (likewise): x gathered by token_of_row, column-wise, and d_pre's column-wise
// copy from fc1_dgrad_fp8 → d_w1 = Σ d_preᵀ·xs (xs = x[token_of_row], never stored in bf16).
void fc1_wgrad_fp8(const TensorView& x, const MoeLayerGrads& g, const Views& v,
                   cudaStream_t stream);

}  // namespace moefuse::layer
