// Raw device pointers of a layer's weights and gradients → views shaped by the config.
#include <initializer_list>

#include "moefuse/layer.h"

namespace moefuse {
namespace {

TensorView device_view(const void* p, DType dtype, std::initializer_list<int64_t> shape) {
  if (!p) return TensorView{};
  return TensorView::contiguous(const_cast<void*>(p), dtype, shape, Device::kCuda);
}

}  // namespace

MoeLayerWeights layer_weight_views(const MoeConfig& c, const MoeLayerWeightPointers& p,
                                   int64_t experts_held) {
  const int64_t E = experts_held > 0 ? experts_held : c.num_experts, H = c.hidden, F = c.ffn,
                fc1 = c.fc1_width();
  const MoeConfig s = shared_expert_config(c);
  const DType bf = DType::kBFloat16, f32 = DType::kFloat32;
  return {.w_router = device_view(p.w_router, bf, {c.num_experts, H}),
          .score_bias = device_view(p.score_bias, f32, {c.num_experts}),
          .w1 = device_view(p.w1, bf, {E, fc1, H}),
          .b1 = device_view(p.b1, f32, {E, fc1}),
          .w2 = device_view(p.w2, bf, {E, H, F}),
          .b2 = device_view(p.b2, f32, {E, H}),
          .shared_w1 = device_view(p.shared_w1, bf, {s.fc1_width(), H}),
          .shared_w2 = device_view(p.shared_w2, bf, {H, s.ffn}),
          .fp8 = {.data = p.fp8, .bytes = p.fp8_bytes}};
}

MoeLayerGrads layer_grad_views(const MoeConfig& c, int64_t tokens, const MoeLayerGradPointers& p,
                               int64_t experts_held) {
  const int64_t E = experts_held > 0 ? experts_held : c.num_experts, H = c.hidden, F = c.ffn,
                fc1 = c.fc1_width();
  const MoeConfig s = shared_expert_config(c);
  const DType f32 = DType::kFloat32;
  return {.dx = device_view(p.dx, DType::kBFloat16, {tokens, H}),
          .d_w_router = device_view(p.d_w_router, f32, {c.num_experts, H}),
          .d_w1 = device_view(p.d_w1, p.expert_grads, {E, fc1, H}),
          .d_b1 = device_view(p.d_b1, f32, {E, fc1}),
          .d_w2 = device_view(p.d_w2, p.expert_grads, {E, H, F}),
          .d_b2 = device_view(p.d_b2, f32, {E, H}),
          .d_shared_w1 = device_view(p.d_shared_w1, f32, {s.fc1_width(), H}),
          .d_shared_w2 = device_view(p.d_shared_w2, f32, {H, s.ffn}),
          .loss_grads = device_view(p.loss_grads, f32, {2}),
          .accumulate = p.accumulate};
}

}  // namespace moefuse
