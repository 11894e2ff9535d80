// CPU reference of the MoE layer's FP8 forward (config.precision kFP8Blockwise, DeepSeek-V3
// recipe), composed from the references the GPU kernels are checked against bit for bit: the
// 1x128 / 128x128 quantisers (ref/quant.h) and the fp64 FP8 grouped GEMM (ref/grouped_gemm_fp8.h).
//
// Routing is the bf16 reference's (ref::layer_forward; the router is bf16 in both), then:
//   xs (= x[token_of_row]) → e4m3, 1x128 scales along H
//   W1 interleaved for GLU (the GPU quantises the interleaved weight), 128x128 blocks; W2 likewise
//   FC1 FP8 GEMM with the activation epilogue, act rounded to bf16 (the GPU's act buffer)
//   act → e4m3, 1x128 scales along F
//   FC2 FP8 GEMM with row scale = routing probability, rounded to bf16 (ys)
//   y[t] = Σ_j ys[row_of[t, j]] + the shared expert (bf16 reference MLP; it stays bf16)
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

}  // namespace moefuse::ref
