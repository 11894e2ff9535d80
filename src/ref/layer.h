// CPU reference of the whole MoE layer, composed from router, dispatch and expert MLP:
//   y = combine(expert_mlp(permute(x))) + shared_expert(x),  plus aux and z losses.
// Backward takes dy and returns the gradient of  <y, dy> + aux_loss + z_loss  w.r.t. every input.
#pragma once

#include <cstdint>
#include <vector>

#include "moefuse/config.h"
#include "moefuse/tensor.h"
#include "ref/expert_mlp.h"

namespace moefuse::ref {

struct LayerWeights {
  TensorView w_router;    // [E, H]
  TensorView score_bias;  // [E] when config.router.use_score_bias, else empty
  ExpertWeights experts;
  TensorView shared_w1;   // [shared_fc1, H] when config.shared_expert_ffn > 0, else empty
  TensorView shared_w2;   // [H, shared_F]
};

struct LayerGrads {
  TensorView dx;          // [T, H]
  TensorView d_w_router;  // [E, H]
  ExpertGrads experts;
  TensorView d_shared_w1;
  TensorView d_shared_w2;
};

// Everything the forward computed: the output, the losses and the state backward reads.
struct LayerForward {
  std::vector<float> y;                  // [T, H]
  double aux_loss = 0, z_loss = 0;
  std::vector<float> logits;             // [T, E]
  std::vector<int32_t> expert_idx;       // [T, k]
  std::vector<float> probs;              // [T, k]
  std::vector<int32_t> counts, offsets;  // [E], [E+1]
  std::vector<int32_t> row_of, token_of_row;
  std::vector<float> xs, pre, act, ys;   // permuted rows and expert intermediates
  std::vector<float> shared_pre;         // [T, shared_fc1]
};

LayerForward layer_forward(const MoeConfig& config, const LayerWeights& weights,
                           const TensorView& x);

void layer_backward(const MoeConfig& config, const LayerWeights& weights, const TensorView& x,
                    const LayerForward& forward, const TensorView& dy, const LayerGrads& grads);

// The shared expert as the bf16 reference runs it (the expert MLP, one expert over all T rows,
// no bias): its output [T, H] from x, with FC1's pre-activation into *pre [T, shared_fc1] when
// given. Empty without a shared expert. Used by layer_forward and the MXFP8 reference.
std::vector<float> shared_expert_forward(const MoeConfig& config, const LayerWeights& weights,
                                         const TensorView& x, std::vector<float>* pre = nullptr);

// The shared expert's backward from dy (dx +=, d_shared_*), from forward.shared_pre; nothing
// without a shared expert. Used by layer_backward and the MXFP8 reference. Checked by its callers.
void shared_expert_backward(const MoeConfig& config, const LayerWeights& weights,
                            const TensorView& x, const LayerForward& forward, const TensorView& dy,
                            const LayerGrads& grads);

// The router's backward from d_probs [T, k] (dx +=, d_w_router), shared by layer_backward and
// the low-precision references (ref/layer_parts.h). Checked by its callers.
void router_backward(const MoeConfig& config, const LayerWeights& weights, const TensorView& x,
                     const LayerForward& forward, const std::vector<float>& d_probs,
                     const LayerGrads& grads);

}  // namespace moefuse::ref
