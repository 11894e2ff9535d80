// Inputs and gradient buffers of the layer references on the CPU (ref/layer*.h), shared by the
// low-precision reference tests: the presets' kinds of layer at the GPU tests' size, Gaussian
// bf16-valued data (larger quantisation error than the GPU tests' grid-valued x).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "common/test_util.h"
#include "moefuse/config.h"
#include "moefuse/tensor.h"
#include "ref/layer.h"

namespace moefuse::test {

// The preset's kind of layer at the GPU test's size (with its expert bias: gpt-oss has one).
inline MoeConfig small_layer(const std::string& name, PrecisionRecipe precision) {
  MoeConfig c = preset(name);
  c.hidden = 256, c.ffn = 128;
  c.num_experts = std::min<int64_t>(c.num_experts, 16);
  c.top_k = std::min<int64_t>(c.top_k, 4);
  if (c.shared_expert_ffn > 0) c.shared_expert_ffn = 128;
  if (c.router.kind == RouterKind::kSigmoidGroupTopK)
    c.router.num_groups = 8, c.router.topk_groups = 4;
  c.precision = precision;
  return c;
}

// bf16-valued data (what the GPU layer reads), fp32 storage.
inline std::vector<float> bf16_normal(size_t n, float stddev) {
  std::vector<float> v = random_normal(n, stddev);
  for (float& x : v) {
    uint32_t u;
    std::memcpy(&u, &x, 4);
    u = (u + 0x7FFF + ((u >> 16) & 1)) & 0xFFFF0000u;
    std::memcpy(&x, &u, 4);
  }
  return v;
}

// x and every weight of a layer, random, with their reference views.
struct RefLayerData {
  MoeConfig c;
  int64_t T;
  std::vector<float> x, wr, bias, w1, b1, w2, b2, sw1, sw2;

  RefLayerData(const MoeConfig& config, int64_t tokens) : c(config), T(tokens) {
    const int64_t E = c.num_experts, H = c.hidden, F = c.ffn;
    const MoeConfig s = shared_expert_config(c);
    x = bf16_normal(T * H, 1.0f);
    wr = bf16_normal(E * H, 1.0f / std::sqrt(float(H)));
    if (c.router.use_score_bias) bias = random_normal(E, 0.05f);
    w1 = bf16_normal(E * c.fc1_width() * H, 1.0f / std::sqrt(float(H)));
    w2 = bf16_normal(E * H * F, 1.0f / std::sqrt(float(F)));
    if (c.expert_bias) {
      b1 = random_normal(E * c.fc1_width(), 0.5f);
      b2 = random_normal(E * H, 0.5f);
    }
    if (c.shared_expert_ffn > 0) {
      sw1 = bf16_normal(s.fc1_width() * H, 1.0f / std::sqrt(float(H)));
      sw2 = bf16_normal(H * s.ffn, 1.0f / std::sqrt(float(s.ffn)));
    }
  }
  ref::LayerWeights weights() {
    const int64_t E = c.num_experts, H = c.hidden, F = c.ffn;
    const MoeConfig s = shared_expert_config(c);
    auto v = [](std::vector<float>& d, std::initializer_list<int64_t> shape) {
      return d.empty() ? TensorView{} : TensorView::contiguous(d.data(), DType::kFloat32, shape);
    };
    return {.w_router = v(wr, {E, H}),
            .score_bias = v(bias, {E}),
            .experts = {.w1 = v(w1, {E, c.fc1_width(), H}),
                        .b1 = v(b1, {E, c.fc1_width()}),
                        .w2 = v(w2, {E, H, F}),
                        .b2 = v(b2, {E, H})},
            .shared_w1 = v(sw1, {s.fc1_width(), H}),
            .shared_w2 = v(sw2, {H, s.ffn})};
  }
  TensorView xv() { return TensorView::contiguous(x.data(), DType::kFloat32, {T, c.hidden}); }
};

// Every gradient of the layer, NaN-filled (absent tensors empty), with its views.
struct RefLayerGrads {
  std::vector<float> dx, dwr, dw1, db1, dw2, db2, dsw1, dsw2;
  ref::LayerGrads views;

  RefLayerGrads(const MoeConfig& c, int64_t T) {
    const int64_t E = c.num_experts, H = c.hidden, F = c.ffn, fc1 = c.fc1_width();
    const MoeConfig s = shared_expert_config(c);
    const bool bias = c.expert_bias, shared = c.shared_expert_ffn > 0;
    auto v = [](std::vector<float>& x, size_t n, std::initializer_list<int64_t> shape) {
      x.assign(n, std::nanf(""));
      return n ? TensorView::contiguous(x.data(), DType::kFloat32, shape) : TensorView{};
    };
    views = {.dx = v(dx, T * H, {T, H}),
             .d_w_router = v(dwr, E * H, {E, H}),
             .experts = {.w1 = v(dw1, E * fc1 * H, {E, fc1, H}),
                         .b1 = v(db1, bias ? E * fc1 : 0, {E, fc1}),
                         .w2 = v(dw2, E * H * F, {E, H, F}),
                         .b2 = v(db2, bias ? E * H : 0, {E, H})},
             .d_shared_w1 = v(dsw1, shared ? s.fc1_width() * H : 0, {s.fc1_width(), H}),
             .d_shared_w2 = v(dsw2, shared ? H * s.ffn : 0, {H, s.ffn})};
  }
  // (name, this gradient, the other's), for each gradient.
  std::vector<std::pair<std::string, std::pair<std::vector<float>*, std::vector<float>*>>>
  paired_with(RefLayerGrads& o) {
    return {{"dx", {&dx, &o.dx}},       {"d_w_router", {&dwr, &o.dwr}},
            {"d_w1", {&dw1, &o.dw1}},   {"d_w2", {&dw2, &o.dw2}},
            {"d_b1", {&db1, &o.db1}},   {"d_b2", {&db2, &o.db2}},
            {"d_shared_w1", {&dsw1, &o.dsw1}}, {"d_shared_w2", {&dsw2, &o.dsw2}}};
  }
};

}  // namespace moefuse::test
