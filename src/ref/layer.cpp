#include "ref/layer.h"

#include <string>

#include "moefuse/error.h"
#include "ref/check.h"
#include "ref/dispatch.h"
#include "ref/router.h"

namespace moefuse::ref {
namespace {

template <class T>
TensorView view(const std::vector<T>& v, DType dtype, std::initializer_list<int64_t> shape) {
  return TensorView::contiguous(const_cast<T*>(v.data()), dtype, shape);
}
TensorView f32(const std::vector<float>& v, std::initializer_list<int64_t> shape) {
  return view(v, DType::kFloat32, shape);
}
TensorView i32(const std::vector<int32_t>& v, std::initializer_list<int64_t> shape) {
  return view(v, DType::kInt32, shape);
}

// The shared expert is the expert MLP with one expert over all T rows: same activation, its own
// width, no bias. Its [fc1, H] and [H, F] weights are seen as [1, fc1, H] and [1, H, F].
MoeConfig shared_config(const MoeConfig& c) {
  MoeConfig s = c;
  s.ffn = c.shared_expert_ffn;
  s.num_experts = 1;
  s.top_k = 1;
  s.expert_bias = false;
  s.router = RouterOptions{};
  return s;
}
TensorView one_expert(const TensorView& w) {
  return TensorView::contiguous(w.data, w.dtype, {1, w.size(0), w.size(1)});
}
ExpertWeights shared_expert(const TensorView& w1, const TensorView& w2) {
  return {.w1 = one_expert(w1), .b1 = {}, .w2 = one_expert(w2), .b2 = {}};
}

// Config, x and every weight the layer reads directly (the expert weights are checked by
// expert_mlp_*, under the names weights.w1 ...). Returns T.
int64_t check_layer(const MoeConfig& c, const LayerWeights& w, const TensorView& x) {
  c.validate();
  const int64_t E = c.num_experts, H = c.hidden;
  const bool shared = c.shared_expert_ffn > 0;
  const MoeConfig s = shared_config(c);
  expect_f32(x, "x", {kAnyExtent, H});
  expect_f32(w.w_router, "weights.w_router", {E, H});
  expect_optional_f32(w.score_bias, "weights.score_bias", c.router.use_score_bias,
                      "config.router.use_score_bias is false", {E});
  const char* why = "config.shared_expert_ffn is 0";
  expect_optional_f32(w.shared_w1, "weights.shared_w1", shared, why, {s.fc1_width(), H});
  expect_optional_f32(w.shared_w2, "weights.shared_w2", shared, why, {H, s.ffn});
  return x.size(0);
}

void expect_size(size_t size, int64_t expected, const char* name) {
  MOEFUSE_EXPECT(static_cast<int64_t>(size) == expected, name,
                 std::to_string(expected) + " elements", std::to_string(size));
}

}  // namespace

LayerForward layer_forward(const MoeConfig& config, const LayerWeights& weights,
                           const TensorView& x) {
  const int64_t T = check_layer(config, weights, x);
  const int64_t E = config.num_experts, H = config.hidden, k = config.top_k;
  const int64_t F = config.ffn, fc1 = config.fc1_width();
  LayerForward f;
  f.logits.resize(T * E);
  router_logits(x, weights.w_router, f32(f.logits, {T, E}));
  f.expert_idx.resize(T * k);
  f.probs.resize(T * k);
  f.counts.resize(E);
  const RouterLosses losses = route(config.router, k, f32(f.logits, {T, E}), weights.score_bias,
                                    i32(f.expert_idx, {T, k}), f32(f.probs, {T, k}),
                                    i32(f.counts, {E}));
  f.aux_loss = losses.aux_loss;
  f.z_loss = losses.z_loss;
  f.offsets.resize(E + 1);
  const int64_t R = expert_offsets(i32(f.counts, {E}), i32(f.offsets, {E + 1}));
  f.row_of.resize(T * k);
  f.token_of_row.resize(R);
  dispatch_maps(i32(f.expert_idx, {T, k}), i32(f.offsets, {E + 1}), i32(f.row_of, {T, k}),
                i32(f.token_of_row, {R}));
  f.xs.resize(R * H);
  permute(x, i32(f.token_of_row, {R}), f32(f.xs, {R, H}));
  f.pre.resize(R * fc1);
  f.act.resize(R * F);
  f.ys.resize(R * H);
  expert_mlp_forward(config, f32(f.xs, {R, H}), i32(f.offsets, {E + 1}), weights.experts,
                     f32(f.pre, {R, fc1}), f32(f.act, {R, F}), f32(f.ys, {R, H}));
  f.y.resize(T * H);
  combine(f32(f.ys, {R, H}), f32(f.probs, {T, k}), i32(f.row_of, {T, k}), f32(f.y, {T, H}));

  const std::vector<float> shared_y = shared_expert_forward(config, weights, x, &f.shared_pre);
  for (size_t i = 0; i < shared_y.size(); ++i)
    f.y[i] = static_cast<float>(static_cast<double>(f.y[i]) + shared_y[i]);
  return f;
}

void layer_backward(const MoeConfig& config, const LayerWeights& weights, const TensorView& x,
                    const LayerForward& forward, const TensorView& dy, const LayerGrads& grads) {
  const int64_t T = check_layer(config, weights, x);
  const int64_t E = config.num_experts, H = config.hidden, k = config.top_k;
  const int64_t fc1 = config.fc1_width();
  const MoeConfig s = shared_config(config);
  const bool shared = config.shared_expert_ffn > 0;
  const int64_t R = static_cast<int64_t>(forward.token_of_row.size());
  expect_size(forward.logits.size(), T * E, "forward.logits");
  expect_size(forward.expert_idx.size(), T * k, "forward.expert_idx");
  expect_size(forward.probs.size(), T * k, "forward.probs");
  expect_size(forward.counts.size(), E, "forward.counts");
  expect_size(forward.offsets.size(), E + 1, "forward.offsets");
  expect_size(forward.row_of.size(), T * k, "forward.row_of");
  expect_size(forward.xs.size(), R * H, "forward.xs");
  expect_size(forward.pre.size(), R * fc1, "forward.pre");
  expect_size(forward.ys.size(), R * H, "forward.ys");
  expect_size(forward.shared_pre.size(), shared ? T * s.fc1_width() : 0, "forward.shared_pre");
  expect_f32(dy, "dy", {T, H});
  expect_f32(grads.dx, "grads.dx", {T, H});
  expect_f32(grads.d_w_router, "grads.d_w_router", {E, H});
  const char* why = "config.shared_expert_ffn is 0";
  expect_optional_f32(grads.d_shared_w1, "grads.d_shared_w1", shared, why, {s.fc1_width(), H});
  expect_optional_f32(grads.d_shared_w2, "grads.d_shared_w2", shared, why, {H, s.ffn});

  std::vector<float> dys(R * H), d_probs(T * k), dxs(R * H);
  combine_backward(dy, f32(forward.ys, {R, H}), f32(forward.probs, {T, k}),
                   i32(forward.row_of, {T, k}), f32(dys, {R, H}), f32(d_probs, {T, k}));
  expert_mlp_backward(config, f32(forward.xs, {R, H}), i32(forward.offsets, {E + 1}),
                      weights.experts, f32(forward.pre, {R, fc1}), f32(dys, {R, H}),
                      f32(dxs, {R, H}), grads.experts);
  permute_backward(f32(dxs, {R, H}), i32(forward.row_of, {T, k}), grads.dx);
  shared_expert_backward(config, weights, x, forward, dy, grads);
  router_backward(config, weights, x, forward, d_probs, grads);
}

std::vector<float> shared_expert_forward(const MoeConfig& config, const LayerWeights& weights,
                                         const TensorView& x, std::vector<float>* pre) {
  if (config.shared_expert_ffn == 0) return {};
  const int64_t T = x.size(0), H = config.hidden;
  const MoeConfig s = shared_config(config);
  const std::vector<int32_t> rows = {0, static_cast<int32_t>(T)};
  std::vector<float> own_pre, act(T * s.ffn), out(T * H);
  std::vector<float>& p = pre ? *pre : own_pre;
  p.resize(T * s.fc1_width());
  expert_mlp_forward(s, x, i32(rows, {2}), shared_expert(weights.shared_w1, weights.shared_w2),
                     f32(p, {T, s.fc1_width()}), f32(act, {T, s.ffn}), f32(out, {T, H}));
  return out;
}

void shared_expert_backward(const MoeConfig& config, const LayerWeights& weights,
                            const TensorView& x, const LayerForward& forward, const TensorView& dy,
                            const LayerGrads& grads) {
  if (config.shared_expert_ffn == 0) return;
  const int64_t T = x.size(0), H = config.hidden;
  const MoeConfig s = shared_config(config);
  const std::vector<int32_t> rows = {0, static_cast<int32_t>(T)};
  std::vector<float> dx_shared(T * H);
  expert_mlp_backward(s, x, i32(rows, {2}), shared_expert(weights.shared_w1, weights.shared_w2),
                      f32(forward.shared_pre, {T, s.fc1_width()}), dy, f32(dx_shared, {T, H}),
                      shared_expert(grads.d_shared_w1, grads.d_shared_w2));
  float* dx = grads.dx.as<float>();
  for (int64_t i = 0; i < T * H; ++i)
    dx[i] = static_cast<float>(static_cast<double>(dx[i]) + dx_shared[i]);
}

void router_backward(const MoeConfig& config, const LayerWeights& weights, const TensorView& x,
                     const LayerForward& forward, const std::vector<float>& d_probs,
                     const LayerGrads& grads) {
  const int64_t T = x.size(0), E = config.num_experts, k = config.top_k;
  std::vector<float> d_logits(T * E);
  route_backward(config.router, k, f32(forward.logits, {T, E}), i32(forward.expert_idx, {T, k}),
                 i32(forward.counts, {E}), f32(d_probs, {T, k}), f32(d_logits, {T, E}));
  router_logits_backward(x, weights.w_router, f32(d_logits, {T, E}), grads.dx, grads.d_w_router);
}

}  // namespace moefuse::ref
