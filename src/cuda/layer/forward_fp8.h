// The routed experts of the FP8 forward (config.precision kFP8Blockwise, DeepSeek-V3 recipe):
// from the dispatch maps to ys, on the main stream. docs/fp8.md has the data flow.
#pragma once

#include <cuda_runtime.h>

#include "cuda/layer/views.h"
#include "moefuse/config.h"
#include "moefuse/layer.h"
#include "moefuse/tensor.h"

namespace moefuse::layer {

// Stages kPermute (permute_quantize_fp8: x → xs e4m3 + K-major 1x128 scales), kFc1 (FP8 GEMM with
// the activation epilogue → act as E4M3 with K-major 1x128 scales, FC2's operand, and unless
// options.recompute_pre the bf16 pre-activation into the cache, v.pre) and kFc2 (FP8 GEMM, row
// scale = routing probability → bf16 ys). Reads v.fp8_weights (prepare_fp8_weights); the
// expert biases w.b1, w.b2 (when config.expert_bias) enter the FP8 epilogues as in the BF16
// GEMMs. Arguments already validated by the layer.
void routed_experts_fp8(const MoeConfig& config, const TensorView& x, const MoeLayerWeights& w,
                        const Views& v, const LayerRun& run, cudaStream_t stream);

}  // namespace moefuse::layer
