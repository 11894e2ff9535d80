// CPU reference of the MoE layer's MXFP8 forward and backward (config.precision kMXFP8): the
// bf16 layer with every operand of the routed experts' GEMMs MXFP8-quantised and dequantised
// (qdq, ref/quant.h: E4M3 values, one power-of-two scale per 32 elements along that GEMM's K,
// then rounded to bf16 as the GPU's qdq passes store them), as Transformer Engine's MXFP8 recipe
// quantises each operand along the K of the GEMM that reads it. Products are fp64 sums of those
// values (the GPU: its BF16 kernels, exact products, fp32 sums), intermediates rounded to bf16
// where the GPU stores them. The expert part works in the GPU's interleaved GLU order, so the
// 32-blocks along fc1 are the GPU's.
//
// Forward (routing, maps and xs from ref::layer_forward):
//   pre = qdq_rows(xs, H) · qdq_rows(W1, H)ᵀ + b1           (bf16; act from the fp64 sum)
//   act = activation(pre) (bf16) → qdq_rows(act, F)
//   ys  = p · (qdq_rows(act) · qdq_rows(W2, F)ᵀ + b2)       (bf16)
//   y[t] = Σ_j ys[row_of[t, j]] + the shared expert (bf16 reference MLP)
// Backward:
//   dys = dy[token_of_row] (bf16); g = qdq_rows(dys, H) · qdq_cols(W2 along H)  (bf16)
//   d_pre, p·act, dp from g: ref::fc2_dgrad_epilogue (dp's bias term on qdq_rows(dys))
//   dxs = qdq_rows(d_pre, fc1) · qdq_cols(W1 along fc1) (bf16) → dx = Σ_j dxs
//   d_w2 = Σ qdq_cols(dys)ᵀ · qdq_cols(p·act), d_w1 = Σ qdq_cols(d_pre)ᵀ · qdq_cols(xs), the
//   column-wise blocks restarting at each expert's first row (with config.bf16_wgrad the
//   unquantised bf16 operands); bias sums, router and shared expert as ref/layer_parts.h.
#pragma once

#include <vector>

#include "moefuse/config.h"
#include "moefuse/tensor.h"
#include "ref/layer.h"

namespace moefuse::ref {

// y [T, H] of the MXFP8 forward. `forward` is ref::layer_forward(config, weights, x).
std::vector<float> layer_forward_mxfp8(const MoeConfig& config, const LayerWeights& weights,
                                       const TensorView& x, const LayerForward& forward);

// Every gradient of the MXFP8 backward, same contract and grads as ref::layer_backward.
void layer_backward_mxfp8(const MoeConfig& config, const LayerWeights& weights,
                          const TensorView& x, const LayerForward& forward, const TensorView& dy,
                          const LayerGrads& grads);

}  // namespace moefuse::ref
