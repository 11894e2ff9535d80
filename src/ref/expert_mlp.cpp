#include "ref/expert_mlp.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "moefuse/error.h"
#include "ref/check.h"
#include "ref/gemm.h"

namespace moefuse::ref {
namespace {

double sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }

// The scalar GLU functions: value and the derivatives with respect to the gate and the up input.
struct GluPoint {
  double value, d_gate, d_up;
};

GluPoint glu(const MoeConfig& c, double g, double u) {
  switch (c.activation) {
    case Activation::kSwiGLU: {
      const double sg = sigmoid(g);
      return {g * sg * u, u * sg * (1.0 + g * (1.0 - sg)), g * sg};
    }
    case Activation::kGeGLU: {  // exact GELU: g * Phi(g)
      const double cdf = 0.5 * (1.0 + std::erf(g / std::sqrt(2.0)));
      const double pdf = std::exp(-0.5 * g * g) / std::sqrt(2.0 * M_PI);
      return {g * cdf * u, u * (cdf + g * pdf), g * cdf};
    }
    case Activation::kReGLU:
      return {std::max(g, 0.0) * u, g > 0 ? u : 0.0, std::max(g, 0.0)};
    case Activation::kClampedSwiGLU: {
      // GPT-OSS: gradients stop where a clamp is active (as torch.clamp: the bound itself passes).
      const double alpha = c.clamped_swiglu.alpha, limit = c.clamped_swiglu.limit;
      const double gc = std::min(g, limit), uc = std::clamp(u, -limit, limit);
      const double sg = sigmoid(alpha * gc);
      const double d_gc = (uc + 1.0) * sg * (1.0 + alpha * gc * (1.0 - sg));
      return {gc * sg * (uc + 1.0), g <= limit ? d_gc : 0.0,
              (u >= -limit && u <= limit) ? gc * sg : 0.0};
    }
    case Activation::kSquaredReLU:
      break;
  }
  throw InvalidArgument("config.activation", "a GLU activation", std::string(activation_name(c.activation)));
}

void activation_row(const MoeConfig& c, const double* pre, double* out) {
  const int64_t F = c.ffn;
  for (int64_t i = 0; i < F; ++i) {
    if (c.activation == Activation::kSquaredReLU) {
      const double r = std::max(pre[i], 0.0);
      out[i] = r * r;
    } else {
      out[i] = glu(c, pre[i], pre[F + i]).value;
    }
  }
}

void activation_row_backward(const MoeConfig& c, const double* pre, const double* d_out,
                             double* d_pre) {
  const int64_t F = c.ffn;
  for (int64_t i = 0; i < F; ++i) {
    if (c.activation == Activation::kSquaredReLU) {
      d_pre[i] = d_out[i] * 2.0 * std::max(pre[i], 0.0);
    } else {
      const GluPoint p = glu(c, pre[i], pre[F + i]);
      d_pre[i] = d_out[i] * p.d_gate;
      d_pre[F + i] = d_out[i] * p.d_up;
    }
  }
}

// The checks forward and backward share: config, xs, offsets and the weights. Returns rows R.
int64_t check_experts(const MoeConfig& c, const TensorView& xs, const TensorView& offsets,
                      const ExpertWeights& w, std::string_view prefix) {
  c.validate();
  const int64_t E = c.num_experts, H = c.hidden, F = c.ffn, fc1 = c.fc1_width();
  expect_f32(xs, "xs", {kAnyExtent, H});
  const int64_t R = xs.size(0);
  expect_offsets(offsets, "offsets", E, R);
  const std::string p(prefix);
  const char* why = "config.expert_bias is false";
  expect_f32(w.w1, p + "w1", {E, fc1, H});
  expect_optional_f32(w.b1, p + "b1", c.expert_bias, why, {E, fc1});
  expect_f32(w.w2, p + "w2", {E, H, F});
  expect_optional_f32(w.b2, p + "b2", c.expert_bias, why, {E, H});
  return R;
}

std::vector<double> to_double(const float* data, int64_t n) { return {data, data + n}; }

void store(const std::vector<double>& v, float* dst) { std::copy(v.begin(), v.end(), dst); }

}  // namespace

void activation_forward(const MoeConfig& config, const double* pre, double* out) {
  config.validate();
  MOEFUSE_EXPECT(pre && out, "pre/out", "non-null pointers", "nullptr");
  activation_row(config, pre, out);
}

void activation_backward(const MoeConfig& config, const double* pre, const double* d_out,
                         double* d_pre) {
  config.validate();
  MOEFUSE_EXPECT(pre && d_out && d_pre, "pre/d_out/d_pre", "non-null pointers", "nullptr");
  activation_row_backward(config, pre, d_out, d_pre);
}

void expert_mlp_forward(const MoeConfig& config, const TensorView& xs, const TensorView& offsets,
                        const ExpertWeights& weights, const TensorView& pre,
                        const TensorView& act, const TensorView& ys) {
  const int64_t R = check_experts(config, xs, offsets, weights, "weights.");
  const int64_t H = config.hidden, F = config.ffn, fc1 = config.fc1_width();
  expect_f32(pre, "pre", {R, fc1});
  expect_f32(act, "act", {R, F});
  expect_f32(ys, "ys", {R, H});
  const int32_t* off = offsets.as<const int32_t>();
  for (int64_t e = 0; e < config.num_experts; ++e) {
    const int64_t r0 = off[e], n = off[e + 1] - off[e];
    std::vector<double> p(n * fc1), a(n * F), y(n * H);
    matmul(n, fc1, H, rows_of(xs.as<const float>() + r0 * H, H),
           rows_of(weights.w1.as<const float>() + e * fc1 * H, H).transposed(), p.data(), false);
    for (int64_t r = 0; r < n; ++r) {
      if (config.expert_bias)
        for (int64_t i = 0; i < fc1; ++i) p[r * fc1 + i] += weights.b1.as<const float>()[e * fc1 + i];
      activation_row(config, &p[r * fc1], &a[r * F]);
    }
    matmul(n, H, F, rows_of(a.data(), F),
           rows_of(weights.w2.as<const float>() + e * H * F, F).transposed(), y.data(), false);
    if (config.expert_bias)
      for (int64_t r = 0; r < n; ++r)
        for (int64_t h = 0; h < H; ++h) y[r * H + h] += weights.b2.as<const float>()[e * H + h];
    store(p, pre.as<float>() + r0 * fc1);
    store(a, act.as<float>() + r0 * F);
    store(y, ys.as<float>() + r0 * H);
  }
}

void expert_mlp_backward(const MoeConfig& config, const TensorView& xs, const TensorView& offsets,
                         const ExpertWeights& weights, const TensorView& pre,
                         const TensorView& dys, const TensorView& dxs, const ExpertGrads& grads) {
  const int64_t R = check_experts(config, xs, offsets, weights, "weights.");
  check_experts(config, xs, offsets, grads, "grads.");
  const int64_t H = config.hidden, F = config.ffn, fc1 = config.fc1_width();
  expect_f32(pre, "pre", {R, fc1});
  expect_f32(dys, "dys", {R, H});
  expect_f32(dxs, "dxs", {R, H});
  const int32_t* off = offsets.as<const int32_t>();
  for (int64_t e = 0; e < config.num_experts; ++e) {
    const int64_t r0 = off[e], n = off[e + 1] - off[e];
    const float* w1 = weights.w1.as<const float>() + e * fc1 * H;
    const float* w2 = weights.w2.as<const float>() + e * H * F;
    const auto x = rows_of(xs.as<const float>() + r0 * H, H);
    const auto dy = rows_of(dys.as<const float>() + r0 * H, H);
    const std::vector<double> p = to_double(pre.as<const float>() + r0 * fc1, n * fc1);
    std::vector<double> a(n * F), da(n * F), dp(n * fc1), dx(n * H), dw1(fc1 * H), dw2(H * F);
    for (int64_t r = 0; r < n; ++r) activation_row(config, &p[r * fc1], &a[r * F]);
    matmul(n, F, H, dy, rows_of(w2, F), da.data(), false);
    matmul(H, F, n, dy.transposed(), rows_of(a.data(), F), dw2.data(), false);
    for (int64_t r = 0; r < n; ++r)
      activation_row_backward(config, &p[r * fc1], &da[r * F], &dp[r * fc1]);
    matmul(fc1, H, n, rows_of(dp.data(), fc1).transposed(), x, dw1.data(), false);
    matmul(n, H, fc1, rows_of(dp.data(), fc1), rows_of(w1, H), dx.data(), false);
    store(dx, dxs.as<float>() + r0 * H);
    store(dw1, grads.w1.as<float>() + e * fc1 * H);
    store(dw2, grads.w2.as<float>() + e * H * F);
    if (config.expert_bias) {
      std::vector<double> db1(fc1), db2(H);
      for (int64_t r = 0; r < n; ++r) {
        for (int64_t i = 0; i < fc1; ++i) db1[i] += dp[r * fc1 + i];
        for (int64_t h = 0; h < H; ++h) db2[h] += dy(r, h);
      }
      store(db1, grads.b1.as<float>() + e * fc1);
      store(db2, grads.b2.as<float>() + e * H);
    }
  }
}

}  // namespace moefuse::ref
