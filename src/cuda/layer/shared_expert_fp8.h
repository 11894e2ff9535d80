// The shared expert in FP8 (config.precision kFP8Blockwise, DeepSeek-V3 recipe): the routed
// experts' recipe (forward_fp8.h, backward_fp8.h) on one expert over all T rows, offsets {0, T}
// — x and dy are its rows as they are, so its operands are quantised straight from them (no
// permute), and no routing probability scales FC2 or asks for dp. Its weights come from
// prepare_fp8_weights like the routed ones (b.fp8.weights). Dispatched to by shared_expert.h.
#pragma once

#include <cuda_runtime.h>

#include "cuda/layer/shared_expert.h"
#include "moefuse/config.h"
#include "moefuse/layer.h"
#include "moefuse/tensor.h"

namespace moefuse::layer {

// x → e4m3 1x128 along H → FP8 FC1 with the activation epilogue (act as E4M3 with K-major scales
// into b.fp8.act, the bf16 pre-activation into b.pre when present) → FP8 FC2 → b.y bf16.
// b.offsets already written.
void shared_expert_forward_fp8(const MoeConfig& config, const TensorView& x,
                               const SharedExpertBuffers& b, cudaStream_t stream);

// [recompute: x → e4m3 → FP8 FC1, linear epilogue → b.pre] → dy → e4m3 → FP8 FC2 dgrad on W2ᵀ
// with the dGLU epilogue → b.dpre, b.act_bwd → d_pre → e4m3 → FP8 GEMM on W1ᵀ → b.dx; the wgrads
// on column-wise e4m3 dy, act, d_pre and x (or, with config.bf16_wgrad, the bf16 ones).
void shared_expert_backward_fp8(const MoeConfig& config, const TensorView& x, const TensorView& dy,
                                const MoeLayerGrads& grads, const SharedExpertBuffers& b,
                                bool recompute, cudaStream_t stream);

}  // namespace moefuse::layer
