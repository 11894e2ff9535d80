// The shared expert: a dense MLP every token passes through, run as a one-expert grouped GEMM over
// all T rows (offsets {0, T}). MoeLayer and EpMoeLayer both run it on their second stream, beside
// the routed experts (and, under expert parallelism, beside the transfers).
#pragma once

#include <cuda_runtime.h>

#include "cuda/layer/fp8_mlp.h"
#include "moefuse/config.h"
#include "moefuse/layer.h"
#include "moefuse/tensor.h"

namespace moefuse::layer {

// Its FP8 operands and weights (config.precision kFP8Blockwise; plan.h's SharedFp8Slices):
// row-wise e4m3 codes with K-major 1x128 scales, column-wise ones for the wgrads, and its
// weights as prepare_fp8_weights leaves them (128x128 blocks, [1, ...], and transposed).
struct SharedExpertFp8 {
  TensorView x, x_scales, act, act_scales, scales_rows;    // forward
  TensorView x_bwd, x_scales_bwd;                          // backward with recompute
  TensorView dy, dy_scales, dpre, dpre_scales, scales_rows_bwd;
  TensorView dy_t, dy_t_scales, act_t, act_t_scales, dpre_t, dpre_t_scales, x_t, x_t_scales;
  Fp8MlpWeights weights;
};

// Its buffers, from the calling layer's memory plan (shapes for T tokens, sF = its ffn, s_fc1 its
// FC1 width).
struct SharedExpertBuffers {
  TensorView offsets;  // [2] int32, {0, T}: written by the forward, read by the backward
  TensorView pre;      // [T, s_fc1] bf16: FC1's pre-activation (the forward saves it; a backward
                       // that recomputes writes it first)
  TensorView act;      // [T, sF] bf16: the forward's activation
  TensorView y;        // [T, H] bf16: the forward's output, added to the layer's y by the caller
  TensorView dpre;     // [T, s_fc1] bf16: the backward's d pre
  TensorView act_bwd;  // [T, sF] bf16: the backward's activation (dW2's operand)
  TensorView dx;       // [T, H] bf16: the backward's d x, added to the layer's dx by the caller
  TensorView g;        // [T, sF] bf16: the unfused FC2 dgrad's output (fused: empty)
  SharedExpertFp8 fp8;  // kFP8Blockwise only (act then lives in fp8.act, E4M3)
};

// b.y from x [T, H] (b.pre saved when present). With config.precision kFP8Blockwise (fused
// only) the FP8 recipe of the routed experts (shared_expert_fp8.h), else bf16.
void shared_expert_forward(const MoeConfig& config, const TensorView& x, const MoeLayerWeights& w,
                           const SharedExpertBuffers& b, bool fused, cudaStream_t stream);

// b.dx, grads.d_shared_w1 and grads.d_shared_w2 from dy [T, H]; with `recompute` FC1's
// pre-activation is recomputed into b.pre first, else b.pre holds the forward's. FP8 as the
// forward.
void shared_expert_backward(const MoeConfig& config, const TensorView& x, const TensorView& dy,
                            const MoeLayerWeights& w, const MoeLayerGrads& grads,
                            const SharedExpertBuffers& b, bool recompute, bool fused,
                            cudaStream_t stream);

// The bf16 wgrads: d_shared_w2 = Σ dyᵀ·act_bwd, d_shared_w1 = Σ d_preᵀ·x (the bf16 layer's, and
// the FP8 layer's with config.bf16_wgrad).
void shared_expert_wgrads_bf16(const TensorView& x, const TensorView& dy, const MoeLayerGrads& g,
                               const SharedExpertBuffers& b, cudaStream_t stream);

}  // namespace moefuse::layer
