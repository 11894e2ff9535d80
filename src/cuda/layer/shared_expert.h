// The shared expert: a dense MLP every token passes through, run as a one-expert grouped GEMM over
// all T rows (offsets {0, T}). MoeLayer and EpMoeLayer both run it on their second stream, beside
// the routed experts (and, under expert parallelism, beside the transfers).
#pragma once

#include <cuda_runtime.h>

#include "moefuse/config.h"
#include "moefuse/layer.h"
#include "moefuse/tensor.h"

namespace moefuse::layer {

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
};

// b.y from x [T, H] (b.pre saved when present).
void shared_expert_forward(const MoeConfig& config, const TensorView& x, const MoeLayerWeights& w,
                           const SharedExpertBuffers& b, bool fused, cudaStream_t stream);

// b.dx, grads.d_shared_w1 and grads.d_shared_w2 from dy [T, H]; with `recompute` FC1's
// pre-activation is recomputed into b.pre first, else b.pre holds the forward's.
void shared_expert_backward(const MoeConfig& config, const TensorView& x, const TensorView& dy,
                            const MoeLayerWeights& w, const MoeLayerGrads& grads,
                            const SharedExpertBuffers& b, bool recompute, bool fused,
                            cudaStream_t stream);

}  // namespace moefuse::layer
