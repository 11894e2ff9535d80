// The CPU reference activations and expert MLP: hand values, finite-difference gradients for all
// five activations with and without biases, empty experts, untouched rows, bad inputs.
#include <gtest/gtest.h>

#include <cmath>

#include "ref/expert_mlp.h"
#include "ref_kinks.h"
#include "ref_test_helpers.h"

namespace moefuse::test {
namespace {

using ref::activation_backward;
using ref::activation_forward;

constexpr Activation kAll[] = {Activation::kSwiGLU, Activation::kGeGLU, Activation::kReGLU,
                               Activation::kSquaredReLU, Activation::kClampedSwiGLU};

MoeConfig small(Activation a, bool bias = false) {
  return MoeConfig{.hidden = 24, .ffn = 10, .num_experts = 4, .top_k = 2, .activation = a,
                   .expert_bias = bias};
}

double sig(double x) { return 1 / (1 + std::exp(-x)); }

TEST(RefActivation, HandValues) {
  MoeConfig c = small(Activation::kSwiGLU);
  c.ffn = 2;
  auto value = [&](Activation a, double g, double u, int i = 0) {
    c.activation = a;
    std::vector<double> pre = {g, 0.3, u, 0.3}, out(2);
    if (a == Activation::kSquaredReLU) pre = {g, 0.3};
    activation_forward(c, pre.data(), out.data());
    return out[i];
  };
  EXPECT_NEAR(value(Activation::kSwiGLU, 2, 3), 2 * sig(2) * 3, 1e-15);
  EXPECT_NEAR(value(Activation::kGeGLU, 1, 2), 0.8413447460685429 * 2, 1e-15);
  EXPECT_EQ(value(Activation::kReGLU, -1, 2), 0.0);
  EXPECT_EQ(value(Activation::kReGLU, 1.5, 2), 3.0);
  EXPECT_EQ(value(Activation::kSquaredReLU, -2, 0), 0.0);
  EXPECT_EQ(value(Activation::kSquaredReLU, 3, 0), 9.0);
  // Clamped SwiGLU (alpha 1.702, limit 7): gate 8 -> 7, up -9 -> -7, and the +1 on the up half.
  const double a = 1.702f;
  EXPECT_NEAR(value(Activation::kClampedSwiGLU, 8, -9), 7 * sig(a * 7) * -6, 1e-12);
  EXPECT_NEAR(value(Activation::kClampedSwiGLU, -1, 0.5), -1 * sig(-a) * 1.5, 1e-12);
  EXPECT_NEAR(value(Activation::kClampedSwiGLU, -20, 9), -20 * sig(-20 * a) * 8, 1e-12);
  // Where a clamp is active the gradient is zero.
  c.activation = Activation::kClampedSwiGLU;
  std::vector<double> pre = {8, 1, -9, 1}, d_out = {1, 1}, d_pre(4);
  activation_backward(c, pre.data(), d_out.data(), d_pre.data());
  EXPECT_EQ(d_pre[0], 0.0);
  EXPECT_EQ(d_pre[2], 0.0);
  EXPECT_NE(d_pre[1], 0.0);
  EXPECT_NE(d_pre[3], 0.0);
}

class RefActivationGrad : public testing::TestWithParam<Activation> {};

// fp64 end to end: step 1e-6, truncation ~1e-12 and rounding ~1e-10 relative; tolerance 1e-6.
TEST_P(RefActivationGrad, MatchesFiniteDifferences) {
  MoeConfig c = small(GetParam());
  const int64_t F = c.ffn, fc1 = c.fc1_width();
  // Values spread over +-15 so that the clamps (limit 7) are active for some, none within 1e-3
  // of a kink (0, +-limit), where a central difference would straddle it.
  std::vector<double> pre(fc1), dir(fc1), d_out(F), d_pre(fc1), out(F);
  for (auto& v : pre) {
    do v = 6.0 * random_normal(1)[0];
    while (std::abs(v) < 1e-3 || std::abs(std::abs(v) - 7.0) < 1e-3);
  }
  for (auto& v : dir) v = random_normal(1)[0];
  for (auto& v : d_out) v = random_normal(1)[0];
  activation_backward(c, pre.data(), d_out.data(), d_pre.data());
  auto loss = [&](double s) {
    std::vector<double> p(pre);
    for (int64_t i = 0; i < fc1; ++i) p[i] += s * dir[i];
    activation_forward(c, p.data(), out.data());
    double l = 0;
    for (int64_t i = 0; i < F; ++i) l += out[i] * d_out[i];
    return l;
  };
  const double eps = 1e-6, fd = (loss(eps) - loss(-eps)) / (2 * eps);
  double analytic = 0, scale = 0;
  for (int64_t i = 0; i < fc1; ++i) {
    analytic += d_pre[i] * dir[i];
    scale += std::abs(d_pre[i] * dir[i]);
  }
  EXPECT_NEAR(fd, analytic, 1e-6 * std::max(scale, 1e-3)) << "pre[0] " << pre[0];
}

INSTANTIATE_TEST_SUITE_P(All, RefActivationGrad, testing::ValuesIn(kAll),
                         [](const auto& info) { return std::string(activation_name(info.param)); });

struct MlpCase {
  Activation activation;
  bool bias;
};

// Experts' rows: 0..4 expert 0, expert 1 empty, 5..14 expert 2, 15..21 expert 3; rows 22 and 23
// belong to no expert and must stay untouched (poisoned with NaN).
struct MlpSetup {
  MoeConfig c;
  int64_t R = 24, E, H, F, fc1;
  std::vector<int32_t> offsets = {0, 5, 5, 15, 22};
  std::vector<float> xs, w1, b1, w2, b2;

  explicit MlpSetup(MoeConfig config) : c(config), E(c.num_experts), H(c.hidden), F(c.ffn), fc1(c.fc1_width()) {
    xs = random_normal(R * H);
    w1 = random_normal(E * fc1 * H, 1.0f / std::sqrt(static_cast<float>(H)));
    w2 = random_normal(E * H * F, 1.0f / std::sqrt(static_cast<float>(F)));
    if (c.expert_bias) b1 = random_normal(E * fc1, 0.3f), b2 = random_normal(E * H, 0.3f);
  }
  TensorView opt(std::vector<float>& v, std::initializer_list<int64_t> shape) {
    return c.expert_bias ? f32(v, shape) : TensorView{};
  }
  ref::ExpertWeights weights() {
    return {.w1 = f32(w1, {E, fc1, H}), .b1 = opt(b1, {E, fc1}), .w2 = f32(w2, {E, H, F}),
            .b2 = opt(b2, {E, H})};
  }
  void forward(std::vector<float>& pre, std::vector<float>& act, std::vector<float>& ys) {
    ref::expert_mlp_forward(c, f32(xs, {R, H}), i32(offsets, {E + 1}), weights(),
                            f32(pre, {R, fc1}), f32(act, {R, F}), f32(ys, {R, H}));
  }
};

class RefExpertMlpGrad : public testing::TestWithParam<MlpCase> {};

// One draw of weights and inputs; nullopt when every direction tried for some parameter crossed
// a kink (a pre value sits closer to a kink than the step), and a fresh draw is needed.
std::optional<FdReport> expert_mlp_fd(const MoeConfig& c) {
  MlpSetup s(c);
  const int64_t R = s.R, H = s.H, rows = s.offsets.back();
  std::vector<float> pre(R * s.fc1, NAN), act(R * s.F, NAN), ys(R * H, NAN);
  s.forward(pre, act, ys);
  for (int64_t i = rows * H; i < R * H; ++i) EXPECT_TRUE(std::isnan(ys[i])) << "row outside experts";
  const std::vector<float> base_pre(pre.begin(), pre.begin() + rows * s.fc1);
  auto G = random_normal(R * H);
  std::fill(G.begin() + rows * H, G.end(), 0.0f);
  std::vector<float> dxs(R * H, NAN), dw1(s.w1.size(), NAN), dw2(s.w2.size(), NAN),
      db1(s.b1.size(), NAN), db2(s.b2.size(), NAN);
  ref::expert_mlp_backward(c, f32(s.xs, {R, H}), i32(s.offsets, {s.E + 1}), s.weights(),
                           f32(pre, {R, s.fc1}), f32(G, {R, H}), f32(dxs, {R, H}),
                           {.w1 = f32(dw1, {s.E, s.fc1, H}), .b1 = s.opt(db1, {s.E, s.fc1}),
                            .w2 = f32(dw2, {s.E, H, s.F}), .b2 = s.opt(db2, {s.E, H})});
  // The empty expert 1 gets zero weight gradients; rows outside every expert stay untouched.
  for (int64_t i = 0; i < s.fc1 * H; ++i) EXPECT_EQ(dw1[s.fc1 * H + i], 0.0f);
  EXPECT_TRUE(std::isnan(dxs[rows * H]));
  std::fill(dxs.begin() + rows * H, dxs.end(), 0.0f);
  auto loss = [&]() -> std::optional<double> {
    std::vector<float> p(R * s.fc1), a(R * s.F), y(R * H, 0.0f);
    s.forward(p, a, y);
    p.resize(rows * s.fc1);
    if (kink_pieces(c, p) != kink_pieces(c, base_pre)) return std::nullopt;
    std::fill(y.begin() + rows * H, y.end(), 0.0f);
    return dot(y, G);
  };
  FdReport report(loss);
  // Steps: 1e-3 on xs and 2e-4 on w1 move pre by ~1e-3; w2 and b2 do not move pre: a larger step.
  if (!report.add("xs", s.xs, dxs, 1e-3) || !report.add("w1", s.w1, dw1, 2e-4) ||
      !report.add("w2", s.w2, dw2, 1e-2))
    return std::nullopt;
  if (c.expert_bias &&
      (!report.add("b1", s.b1, db1, 1e-3) || !report.add("b2", s.b2, db2, 1e-2)))
    return std::nullopt;
  return report;
}

// Tolerance 2e-3: the steps move pre by ~1e-3, so the O(eps^2) truncation is ~1e-6 relative;
// the fp32 rounding of ys (6e-8 relative, ~1e-6 absolute in <ys, G>) divided by directional
// derivatives of ~1e-2 gives up to ~1e-4. A missing term of the chain rule (a bias, one GLU
// half, the clamp mask) is off by far more.
TEST_P(RefExpertMlpGrad, MatchesFiniteDifferences) {
  MoeConfig c = small(GetParam().activation, GetParam().bias);
  c.clamped_swiglu.limit = 1.0f;  // pre ~ N(0, 1): about a third of the values clamped
  expect_fd_within([&] { return expert_mlp_fd(c); }, 2e-3,
                   "five draws each had a pre value on a kink for every direction tried");
}

std::vector<MlpCase> all_mlp_cases() {
  std::vector<MlpCase> out;
  for (Activation a : kAll) out.push_back({a, false}), out.push_back({a, true});
  return out;
}

INSTANTIATE_TEST_SUITE_P(All, RefExpertMlpGrad, testing::ValuesIn(all_mlp_cases()),
                         [](const auto& info) {
                           return std::string(activation_name(info.param.activation)) +
                                  (info.param.bias ? "_bias" : "_nobias");
                         });

TEST(RefExpertMlp, RejectsBadInputs) {
  MlpSetup s(small(Activation::kSwiGLU));
  const int64_t R = s.R, H = s.H, E = s.E, F = s.F, fc1 = s.fc1;
  std::vector<float> pre(R * fc1), act(R * F), ys(R * H), b(E * fc1), dys = random_normal(R * H);
  auto O = i32(s.offsets, {E + 1});
  auto X = f32(s.xs, {R, H});
  auto W = s.weights();
  auto fwd = [&](const MoeConfig& c, const TensorView& xs, const TensorView& off,
                 const ref::ExpertWeights& w, const TensorView& p) {
    ref::expert_mlp_forward(c, xs, off, w, p, f32(act, {R, F}), f32(ys, {R, H}));
  };
  auto P = f32(pre, {R, fc1});
  EXPECT_NO_THROW(fwd(s.c, X, O, W, P));
  auto bad_config = s.c;
  bad_config.top_k = 7;
  expect_invalid([&] { fwd(bad_config, X, O, W, P); }, "config.top_k");
  expect_invalid([&] { fwd(s.c, f32(s.xs, {R / 2, 2 * H}), O, W, P); }, "xs");
  auto bad_offsets = s.offsets;
  bad_offsets[4] = static_cast<int32_t>(R + 1);
  expect_invalid([&] { fwd(s.c, X, i32(bad_offsets, {E + 1}), W, P); }, "offsets");
  bad_offsets = s.offsets;
  bad_offsets[0] = -1;
  expect_invalid([&] { fwd(s.c, X, i32(bad_offsets, {E + 1}), W, P); }, "offsets");
  expect_invalid([&] { fwd(s.c, X, i32(s.offsets, {E}), W, P); }, "offsets");
  auto w_squared = W;  // an FC1 of width F is the squared-ReLU layout, not GLU's 2F
  w_squared.w1 = f32(s.w1, {E, F, H});
  expect_invalid([&] { fwd(s.c, X, O, w_squared, P); }, "weights.w1");
  auto w_bias = W;
  w_bias.b1 = f32(b, {E, fc1});
  expect_invalid([&] { fwd(s.c, X, O, w_bias, P); }, "weights.b1");
  auto with_bias = s.c;
  with_bias.expert_bias = true;
  expect_invalid([&] { fwd(with_bias, X, O, w_bias, P); }, "weights.b2");
  auto w_gpu = W;
  w_gpu.w2.device = Device::kCuda;
  expect_invalid([&] { fwd(s.c, X, O, w_gpu, P); }, "weights.w2");
  expect_invalid([&] { fwd(s.c, X, O, W, f32(pre, {R, F})); }, "pre");
  std::vector<float> dxs(R * H), g1(s.w1.size()), g2(s.w2.size());
  ref::ExpertGrads G{.w1 = f32(g1, {E, fc1, H}), .b1 = {}, .w2 = f32(g2, {E, H, F}), .b2 = {}};
  auto bwd = [&](const ref::ExpertGrads& g, const TensorView& d) {
    ref::expert_mlp_backward(s.c, X, O, W, P, d, f32(dxs, {R, H}), g);
  };
  EXPECT_NO_THROW(bwd(G, f32(dys, {R, H})));
  expect_invalid([&] { bwd(G, f32(dys, {R, H - 1})); }, "dys");
  auto G_bad = G;
  G_bad.w2 = f32(g2, {E, F, H});
  expect_invalid([&] { bwd(G_bad, f32(dys, {R, H})); }, "grads.w2");
  expect_invalid([&] { activation_forward(s.c, nullptr, nullptr); }, "pre/out");
}

}  // namespace
}  // namespace moefuse::test
