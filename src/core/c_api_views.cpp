#include "core/c_api_views.h"

#include <string>

namespace moefuse::capi {

TensorView dev(const void* p, DType dtype, std::initializer_list<int64_t> shape) {
  if (!p) return TensorView{};
  return TensorView::contiguous(const_cast<void*>(p), dtype, shape, Device::kCuda);
}

MoeLayerWeights weights_of(const MoeConfig& c, const moefuse_layer_weights_t& w,
                           int64_t experts_held) {
  return layer_weight_views(c,
                            {.w_router = w.w_router,
                             .score_bias = w.score_bias,
                             .w1 = w.w1,
                             .b1 = w.b1,
                             .w2 = w.w2,
                             .b2 = w.b2,
                             .shared_w1 = w.shared_w1,
                             .shared_w2 = w.shared_w2,
                             .fp8 = w.fp8_weights,
                             .fp8_bytes = w.fp8_weights_bytes},
                            experts_held);
}

MoeLayerGrads grads_of(const MoeConfig& c, int64_t tokens, const moefuse_layer_grads_t& g,
                       int64_t experts_held) {
  MOEFUSE_EXPECT(g.expert_grads == MOEFUSE_EXPERT_GRADS_FP32 ||
                     g.expert_grads == MOEFUSE_EXPERT_GRADS_BF16,
                 "grads.expert_grads", "MOEFUSE_EXPERT_GRADS_FP32 or MOEFUSE_EXPERT_GRADS_BF16",
                 std::to_string(static_cast<int>(g.expert_grads)));
  return layer_grad_views(c, tokens,
                          {.dx = g.dx,
                           .d_w_router = g.d_w_router,
                           .d_w1 = g.d_w1,
                           .d_b1 = g.d_b1,
                           .d_w2 = g.d_w2,
                           .d_b2 = g.d_b2,
                           .d_shared_w1 = g.d_shared_w1,
                           .d_shared_w2 = g.d_shared_w2,
                           .expert_grads = g.expert_grads == MOEFUSE_EXPERT_GRADS_BF16
                                               ? DType::kBFloat16
                                               : DType::kFloat32,
                           .loss_grads = g.loss_grads,
                           .accumulate = g.accumulate != 0},
                          experts_held);
}

void expect_tokens(int64_t tokens) {
  MOEFUSE_EXPECT(tokens >= 1, "tokens", "at least 1", std::to_string(tokens));
}

}  // namespace moefuse::capi
