// CPU reference of the MoE layer's FP8 forward and backward (config.precision kFP8Blockwise,
// DeepSeek-V3 recipe), composed from the references the GPU kernels are checked against bit for
// bit: the 1x128 / 128x128 / column-wise quantisers (ref/quant.h, ref/grouped_gemm_fp8_wgrad.h)
// and the fp64 FP8 GEMMs (ref/grouped_gemm_fp8*.h).
//
// Forward. Routing is the bf16 reference's (ref::layer_forward; the router is bf16 in both), then:
//   xs (= x[token_of_row]) → e4m3, 1x128 scales along H
//   W1 interleaved for GLU (the GPU quantises the interleaved weight), 128x128 blocks; W2 likewise
//   FC1 FP8 GEMM with the activation epilogue, act rounded to bf16 (the GPU's act buffer)
//   act → e4m3, 1x128 scales along F
//   FC2 FP8 GEMM with row scale = routing probability, rounded to bf16 (ys)
//   y[t] = Σ_j ys[row_of[t, j]] + the shared expert, the same FP8 MLP as one expert over all T
//          rows of x (its W1 interleaved and quantised likewise), without row scale or bias
#pragma once

#include <vector>

#include "moefuse/config.h"
#include "moefuse/tensor.h"
#include "ref/layer.h"

namespace moefuse::ref {

// y [T, H] of the FP8 forward. `forward` is ref::layer_forward(config, weights, x) of the same
// inputs (its routing, maps and xs are used). Expert biases (config.expert_bias) are added in
// the FP8 epilogues before the activation / row scale, as in the GPU layer.
std::vector<float> layer_forward_fp8(const MoeConfig& config, const LayerWeights& weights,
                                     const TensorView& x, const LayerForward& forward);

// Every gradient of the FP8 backward (MoeLayer::backward with kFP8Blockwise), same contract and
// grads as ref::layer_backward (reference layout: [gate; up] GLU rows), from the same
// references the GPU pieces are checked against:
//   pre   = FP8 FC1 GEMM of the forward's xs codes, linear epilogue + b1, bf16
//   dys[r] = dy[token_of_row[r]] → e4m3 1x128 along H → ref::fc2_dgrad_fp8 on W2ᵀ (the
//           transposed 128x128 blocks) → d_pre, p·act (bf16), dp (fp32)
//   d_pre → e4m3 1x128 along fc1 → FP8 GEMM on W1ᵀ → dxs (bf16) → dx = Σ_j dxs
//   d_w2 = FP8 wgrad of dys and p·act, d_w1 = of d_pre and xs, both column-wise quantised
//   (128-row groups of one expert); with config.bf16_wgrad fp64 sums of those bf16 values
//   instead (the bf16 wgrads'); d_b2 = Σ p·dys, d_b1 = Σ d_pre (fp64 sums of bf16 values)
//   dp → d_probs → the router's backward (ref::router_backward); the shared expert's backward
//   the same FP8 recipe as one expert over all T rows (x and dy its rows, no row scale), its
//   dx added to dx.
void layer_backward_fp8(const MoeConfig& config, const LayerWeights& weights, const TensorView& x,
                        const LayerForward& forward, const TensorView& dy,
                        const LayerGrads& grads);

}  // namespace moefuse::ref
