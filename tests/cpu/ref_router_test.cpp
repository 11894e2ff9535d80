// The CPU reference router: hand-checked routing and losses, finite-difference gradients, and
// every bad-input path.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>

#include "ref/router.h"
#include "ref_test_helpers.h"

namespace moefuse::test {
namespace {

using ref::route;
using ref::route_backward;

struct Routed {
  std::vector<int32_t> idx;
  std::vector<float> probs;
  std::vector<int32_t> counts;
  ref::RouterLosses losses;
};

Routed run_route(const RouterOptions& o, int64_t k, std::vector<float>& logits, int64_t E,
                 std::vector<float>* bias = nullptr) {
  const int64_t T = static_cast<int64_t>(logits.size()) / E;
  Routed r{.idx = std::vector<int32_t>(T * k), .probs = std::vector<float>(T * k),
           .counts = std::vector<int32_t>(E), .losses = {}};
  r.losses = route(o, k, f32(logits, {T, E}), bias ? f32(*bias, {E}) : TensorView{},
                   i32(r.idx, {T, k}), f32(r.probs, {T, k}), i32(r.counts, {E}));
  return r;
}

float logit_of(double s) { return static_cast<float>(std::log(s / (1 - s))); }

TEST(RefRouter, SoftmaxTieLowerIndexWinsWithRenormAndScaling) {
  std::vector<float> logits = {1, 3, 0, 3, 2};
  const double denom = std::exp(1) + 2 * std::exp(3) + 1 + std::exp(2);
  RouterOptions o{.renormalize = false};
  auto r = run_route(o, 2, logits, 5);
  EXPECT_EQ(r.idx, (std::vector<int32_t>{1, 3}));
  EXPECT_NEAR(r.probs[0], std::exp(3) / denom, 1e-7);
  EXPECT_NEAR(r.probs[1], std::exp(3) / denom, 1e-7);
  EXPECT_EQ(r.counts, (std::vector<int32_t>{0, 1, 0, 1, 0}));
  o.renormalize = true;
  o.routed_scaling_factor = 2.5f;
  r = run_route(o, 3, logits, 5);
  EXPECT_EQ(r.idx, (std::vector<int32_t>{1, 3, 4}));
  const double sum = 2 * std::exp(3) + std::exp(2);
  EXPECT_NEAR(r.probs[0], 2.5 * std::exp(3) / sum, 1e-6);
  EXPECT_NEAR(r.probs[2], 2.5 * std::exp(2) / sum, 1e-6);
  r = run_route(o, 1, logits, 5);
  EXPECT_EQ(r.idx, (std::vector<int32_t>{1}));
  EXPECT_FLOAT_EQ(r.probs[0], 2.5f);
}

TEST(RefRouter, GroupLimitedSelectionSkipsTheBestExpertOfALosingGroup) {
  // 4 groups of 2; group scores 1.0, 1.2, 1.1, 0.2: groups 1 and 2 win, so expert 0 (the best
  // single score, 0.95) is not eligible. Experts 2..5 tie in pairs: 2 and 3 (0.6) win.
  std::vector<float> logits;
  for (double s : {0.95, 0.05, 0.6, 0.6, 0.55, 0.55, 0.1, 0.1}) logits.push_back(logit_of(s));
  RouterOptions o{.kind = RouterKind::kSigmoidGroupTopK, .renormalize = false,
                  .num_groups = 4, .topk_groups = 2};
  auto r = run_route(o, 2, logits, 8);
  EXPECT_EQ(r.idx, (std::vector<int32_t>{2, 3}));
  EXPECT_NEAR(r.probs[0], 0.6, 1e-6);
  // With one group the best expert wins.
  o.num_groups = 1, o.topk_groups = 1;
  r = run_route(o, 2, logits, 8);
  EXPECT_EQ(r.idx, (std::vector<int32_t>{0, 2}));
}

TEST(RefRouter, ScoreBiasChangesSelectionButNotWeights) {
  std::vector<float> logits;
  for (double s : {0.7, 0.6, 0.2, 0.1}) logits.push_back(logit_of(s));
  std::vector<float> bias = {0, 0.2f, 0, 0};
  RouterOptions o{.kind = RouterKind::kSigmoidGroupTopK, .renormalize = false,
                  .routed_scaling_factor = 2.0f, .use_score_bias = true};
  auto r = run_route(o, 1, logits, 4, &bias);
  EXPECT_EQ(r.idx, (std::vector<int32_t>{1}));
  EXPECT_NEAR(r.probs[0], 2.0 * 0.6, 1e-6);  // the unbiased score, scaled
  bias[1] = 0.05f;
  r = run_route(o, 1, logits, 4, &bias);
  EXPECT_EQ(r.idx, (std::vector<int32_t>{0}));
  EXPECT_NEAR(r.probs[0], 2.0 * 0.7, 1e-6);
}

TEST(RefRouter, AuxAndZLossByHand) {
  // Softmax: p rows [.25 .5 .25] and [.75 .125 .125]; top-1 picks 1 and 0, f = [.5 .5 0],
  // P = [.5 .3125 .1875]: aux = a * 3 * (.25 + .15625); lse = ln 4, ln 8: z = b * 6.5 ln^2 2.
  std::vector<float> logits = {0, std::log(2.0f), 0, std::log(6.0f), 0, 0};
  RouterOptions o{.aux_loss_coeff = 0.01f, .z_loss_coeff = 0.001f};
  auto r = run_route(o, 1, logits, 3);
  EXPECT_EQ(r.idx, (std::vector<int32_t>{1, 0}));
  EXPECT_NEAR(r.losses.aux_loss, 0.01f * 3 * 0.40625, 1e-8);
  EXPECT_NEAR(r.losses.z_loss, 0.001f * 6.5 * std::log(2) * std::log(2), 1e-9);
  EXPECT_NEAR(r.losses.P[1], 0.3125, 1e-7);
  EXPECT_DOUBLE_EQ(r.losses.f[2], 0.0);
  // Sigmoid, all logits 0: s = .5, q uniform, ties pick 0 and 1: aux = a * 4 * 2 * (.5 * .25).
  std::vector<float> zeros(4, 0.0f);
  o.kind = RouterKind::kSigmoidGroupTopK;
  r = run_route(o, 2, zeros, 4);
  EXPECT_EQ(r.idx, (std::vector<int32_t>{0, 1}));
  EXPECT_NEAR(r.probs[0], 0.5, 1e-7);  // renormalised
  EXPECT_NEAR(r.losses.aux_loss, 0.01f, 1e-8);
  EXPECT_NEAR(r.losses.z_loss, 0.001f * std::log(4) * std::log(4), 1e-9);
}

TEST(RefRouter, NoTokensGiveZeroLossesAndCounts) {
  std::vector<float> logits;
  RouterOptions o{.aux_loss_coeff = 0.1f, .z_loss_coeff = 0.1f};
  auto r = run_route(o, 2, logits, 4);
  EXPECT_EQ(r.counts, (std::vector<int32_t>(4, 0)));
  EXPECT_EQ(r.losses.aux_loss, 0.0);
  EXPECT_EQ(r.losses.z_loss, 0.0);
}

// Logits per token: a shuffled ladder 0, 0.5, 1, ... plus noise below 0.1, scaled around 0, so
// that every score gap is clear of the finite-difference step.
std::vector<float> gapped_logits(int64_t T, int64_t E) {
  std::vector<float> out(T * E);
  for (int64_t t = 0; t < T; ++t) {
    std::vector<int> order(E);
    std::iota(order.begin(), order.end(), 0);
    std::shuffle(order.begin(), order.end(), rng());
    const auto noise = random_uniform(E, 0.0f, 0.1f);
    for (int64_t e = 0; e < E; ++e)
      out[t * E + e] = 0.5f * static_cast<float>(order[e]) - 0.25f * static_cast<float>(E) + noise[e];
  }
  return out;
}

struct RouteCase {
  RouterKind kind;
  bool renormalize;
};

class RefRouteBackward : public testing::TestWithParam<RouteCase> {};

// Tolerance 2e-3 (the errors seen are 3e-5 to 2e-4): with a step of 1e-2 per logit the O(eps^2)
// truncation error of the central difference is about 1e-5 relative; the fp32 rounding of the
// probs (6e-8 relative over T*k terms, ~1e-6 absolute) divided by a directional derivative of
// ~5e-3 adds up to 2e-4. 2e-3 keeps a 10x margin, while a wrong term (a missing renorm, aux or z
// part) is off by far more than 1e-2.
TEST_P(RefRouteBackward, MatchesFiniteDifferences) {
  const int64_t T = 13, E = 8, k = 2;
  RouterOptions o{.kind = GetParam().kind, .renormalize = GetParam().renormalize,
                  .routed_scaling_factor = 1.7f, .aux_loss_coeff = 0.3f, .z_loss_coeff = 0.05f};
  std::vector<float> bias;
  if (o.kind == RouterKind::kSigmoidGroupTopK) {
    o.num_groups = 4, o.topk_groups = 2, o.use_score_bias = true;
    bias = random_normal(E, 0.05f);
  }
  // A fresh draw when every direction changed the selection (two group scores nearly tied).
  auto draw = [&]() -> std::optional<FdReport> {
    auto logits = gapped_logits(T, E);
    const auto dp = random_normal(T * k);
    auto base = run_route(o, k, logits, E, bias.empty() ? nullptr : &bias);
    std::vector<float> d_logits(T * E), dp_copy = dp;
    route_backward(o, k, f32(logits, {T, E}), i32(base.idx, {T, k}), i32(base.counts, {E}),
                   f32(dp_copy, {T, k}), f32(d_logits, {T, E}));
    FdReport report([&]() -> std::optional<double> {
      auto r = run_route(o, k, logits, E, bias.empty() ? nullptr : &bias);
      if (r.idx != base.idx) return std::nullopt;
      return dot(r.probs, dp) + r.losses.aux_loss + r.losses.z_loss;
    });
    if (!report.add("d_logits", logits, d_logits, 1e-2)) return std::nullopt;
    return report;
  };
  expect_fd_within(draw, 2e-3, "five draws each changed the selection for every direction tried");
}

INSTANTIATE_TEST_SUITE_P(Kinds, RefRouteBackward,
                         testing::Values(RouteCase{RouterKind::kSoftmaxTopK, true},
                                         RouteCase{RouterKind::kSoftmaxTopK, false},
                                         RouteCase{RouterKind::kSigmoidGroupTopK, true},
                                         RouteCase{RouterKind::kSigmoidGroupTopK, false}),
                         [](const auto& info) {
                           return std::string(router_kind_name(info.param.kind)) +
                                  (info.param.renormalize ? "_renorm" : "_plain");
                         });

// At top_k 1 with renormalisation the routing weight is 1 whatever the logits: without aux and z
// losses the gradient to the logits is exactly zero, not rounding residue (the GPU kernel uses the
// same cancelling form; run 9's fuzz found residue of the old form relative-compared against ~0).
TEST(RefRouter, TopOneRenormalisedGradientIsExactlyZero) {
  const int64_t T = 9, E = 6, k = 1;
  for (RouterKind kind : {RouterKind::kSoftmaxTopK, RouterKind::kSigmoidGroupTopK}) {
    RouterOptions o{.kind = kind, .renormalize = true, .routed_scaling_factor = 2.5f};
    if (kind == RouterKind::kSigmoidGroupTopK) o.num_groups = 3, o.topk_groups = 1;
    auto logits = gapped_logits(T, E);
    auto base = run_route(o, k, logits, E);
    std::vector<float> dp = random_normal(T * k), d_logits(T * E, 1.0f);
    route_backward(o, k, f32(logits, {T, E}), i32(base.idx, {T, k}), i32(base.counts, {E}),
                   f32(dp, {T, k}), f32(d_logits, {T, E}));
    EXPECT_TRUE(std::all_of(d_logits.begin(), d_logits.end(), [](float v) { return v == 0.0f; }))
        << router_kind_name(kind);
  }
}

// d_logits is linear in d_probs: moving each d_probs entry by up to its scale moves d_logits by at
// most route_backward_error_scale, and the worst of a few sign patterns comes near that.
TEST(RefRouter, ErrorScaleBoundsHowFarDProbsMoveDLogits) {
  const int64_t T = 7, E = 8, k = 3;
  for (RouterKind kind : {RouterKind::kSoftmaxTopK, RouterKind::kSigmoidGroupTopK}) {
    for (bool renormalize : {true, false}) {
      RouterOptions o{.kind = kind, .renormalize = renormalize, .routed_scaling_factor = 2.5f,
                      .aux_loss_coeff = 0.01f, .z_loss_coeff = 1e-3f};
      if (kind == RouterKind::kSigmoidGroupTopK) o.num_groups = 4, o.topk_groups = 2;
      auto logits = gapped_logits(T, E);
      auto base = run_route(o, k, logits, E);
      auto dp = random_normal(T * k), scale = random_uniform(T * k, 0.5f, 1.0f);
      std::vector<float> bound(T * E), d0(T * E), d1(T * E);
      ref::route_backward_error_scale(o, k, f32(logits, {T, E}), i32(base.idx, {T, k}),
                                      f32(scale, {T, k}), f32(bound, {T, E}));
      route_backward(o, k, f32(logits, {T, E}), i32(base.idx, {T, k}), i32(base.counts, {E}),
                     f32(dp, {T, k}), f32(d0, {T, E}));
      double worst = 0;  // the largest |d1 − d0| / bound seen
      for (int draw = 0; draw < 64; ++draw) {
        auto moved = dp;
        for (int64_t i = 0; i < T * k; ++i) moved[i] += (rng()() & 1 ? 1.0f : -1.0f) * scale[i];
        route_backward(o, k, f32(logits, {T, E}), i32(base.idx, {T, k}), i32(base.counts, {E}),
                       f32(moved, {T, k}), f32(d1, {T, E}));
        for (int64_t i = 0; i < T * E; ++i) {
          ASSERT_LE(std::fabs(d1[i] - d0[i]), bound[i] * (1 + 1e-5) + 1e-6) << i;
          if (bound[i] > 1e-3) worst = std::max(worst, double(std::fabs(d1[i] - d0[i]) / bound[i]));
        }
      }
      EXPECT_GT(worst, 0.5) << router_kind_name(kind) << (renormalize ? " renormalised" : "");
    }
  }
}

TEST(RefRouter, ErrorScaleRejectsBadShapesByName) {
  const int64_t T = 5, E = 6, k = 2;
  const RouterOptions o{.kind = RouterKind::kSoftmaxTopK, .renormalize = true};
  auto logits = gapped_logits(T, E);
  auto base = run_route(o, k, logits, E);
  std::vector<float> scale(T * k, 1.0f), bound(T * E);
  auto call = [&](const TensorView& s, const TensorView& b) {
    ref::route_backward_error_scale(o, k, f32(logits, {T, E}), i32(base.idx, {T, k}), s, b);
  };
  expect_invalid([&] { call(f32(scale, {T, k - 1}), f32(bound, {T, E})); }, "d_probs_scale");
  expect_invalid([&] { call(f32(scale, {T, k}), f32(bound, {T, E - 1})); }, "d_logits_scale");
}

TEST(RefRouter, LogitsBackwardMatchesFiniteDifferencesAndAccumulates) {
  const int64_t T = 13, H = 24, E = 6;
  auto x = random_normal(T * H), w = random_normal(E * H), g = random_normal(T * E);
  std::vector<float> logits(T * E), d_w(E * H);
  const auto dx0 = random_normal(T * H);
  auto dx = dx0;
  ref::router_logits_backward(f32(x, {T, H}), f32(w, {E, H}), f32(g, {T, E}), f32(dx, {T, H}),
                              f32(d_w, {E, H}));
  std::vector<float> dx_only(T * H);
  for (int64_t i = 0; i < T * H; ++i) dx_only[i] = dx[i] - dx0[i];
  auto loss = [&]() -> std::optional<double> {
    ref::router_logits(f32(x, {T, H}), f32(w, {E, H}), f32(logits, {T, E}));
    return dot(logits, g);
  };
  // Bilinear: the central difference is exact up to fp32 rounding of the logits (1e-7 / 2e-2).
  EXPECT_LT(finite_difference(x, dx_only, 1e-2, loss).error, 1e-4);
  EXPECT_LT(finite_difference(w, d_w, 1e-2, loss).error, 1e-4);
}

// A part's own batch gives its losses bit for bit; a batch that cannot hold the part, or whose
// counts do not sum to its tokens · k, is rejected by name.
TEST(RefRouter, LossesOverABatchCheckItAgainstThePart) {
  const int64_t T = 3, E = 4, k = 2;
  std::vector<float> logits = random_normal(T * E), d_probs = random_normal(T * k), dl(T * E);
  const RouterOptions o{.aux_loss_coeff = 0.1f, .z_loss_coeff = 0.01f};
  Routed r = run_route(o, k, logits, E);
  const TensorView L = f32(logits, {T, E}), C = i32(r.counts, {E});
  const ref::RouterBatch own = ref::router_batch_part(T, C);
  const ref::RouterLosses same = ref::router_losses(o, k, L, C, own);
  EXPECT_EQ(same.aux_loss, r.losses.aux_loss);
  EXPECT_EQ(same.z_loss, r.losses.z_loss);
  const auto losses_over = [&](const ref::RouterBatch& b) { ref::router_losses(o, k, L, C, b); };
  const auto backward_over = [&](const ref::RouterBatch& b) {
    route_backward(o, k, L, i32(r.idx, {T, k}), C, f32(d_probs, {T, k}), f32(dl, {T, E}), b);
  };
  ref::RouterBatch bad = own;
  bad.tokens = T - 1;
  expect_invalid([&] { losses_over(bad); }, "batch.tokens");
  expect_invalid([&] { backward_over(bad); }, "batch.tokens");
  bad = own, bad.tokens += 1;
  expect_invalid([&] { losses_over(bad); }, "batch.counts");  // sums to T·k, not (T + 1)·k
  bad = own, bad.counts.pop_back();
  expect_invalid([&] { backward_over(bad); }, "batch.counts");
  bad = own, bad.counts[r.idx[0]] -= 1, bad.counts[(r.idx[0] + 1) % E] += 1;
  expect_invalid([&] { losses_over(bad); }, "batch.counts");  // below the part's count
  std::vector<int32_t> counts_bad = r.counts;
  counts_bad[r.idx[0]] -= 1;
  expect_invalid([&] { ref::router_losses(o, k, L, i32(counts_bad, {E})); }, "counts");
  expect_invalid([&] { ref::router_batch_part(-1, C); }, "tokens");
}

TEST(RefRouter, RejectsBadInputs) {
  const int64_t T = 3, E = 4, k = 2, H = 5;
  std::vector<float> logits = random_normal(T * E), probs(T * k), x = random_normal(T * H),
                     w = random_normal(E * H), dx(T * H), dw(E * H), dl(T * E), bias(E);
  std::vector<int32_t> idx(T * k), counts(E);
  RouterOptions o;
  auto L = f32(logits, {T, E});
  auto I = i32(idx, {T, k});
  auto P = f32(probs, {T, k});
  auto C = i32(counts, {E});
  expect_invalid([&] { route(o, 5, L, {}, I, P, C); }, "config.top_k");
  expect_invalid([&] { route(o, 0, L, {}, I, P, C); }, "config.top_k");
  expect_invalid([&] { route(o, k, L, f32(bias, {E}), I, P, C); }, "score_bias");
  RouterOptions bad_bias{.use_score_bias = true};
  expect_invalid([&] { route(bad_bias, k, L, f32(bias, {E}), I, P, C); },
                 "config.router.use_score_bias");
  RouterOptions sig{.kind = RouterKind::kSigmoidGroupTopK, .num_groups = 2, .topk_groups = 1,
                    .use_score_bias = true};
  expect_invalid([&] { route(sig, k, L, {}, I, P, C); }, "score_bias");
  RouterOptions bad_groups{.kind = RouterKind::kSigmoidGroupTopK, .num_groups = 3};
  expect_invalid([&] { route(bad_groups, k, L, {}, I, P, C); }, "config.router.num_groups");
  expect_invalid([&] { route(o, k, f32(logits, {T * E}), {}, I, P, C); }, "logits");
  expect_invalid([&] { route(o, k, f32(logits, {T * E, 0}), {}, I, P, C); }, "logits");
  auto L_int = L;
  L_int.dtype = DType::kInt32;
  expect_invalid([&] { route(o, k, L_int, {}, I, P, C); }, "logits");
  auto L_gpu = L;
  L_gpu.device = Device::kCuda;
  expect_invalid([&] { route(o, k, L_gpu, {}, I, P, C); }, "logits");
  auto L_strided = L;
  std::swap(L_strided.strides[0], L_strided.strides[1]);
  expect_invalid([&] { route(o, k, L_strided, {}, I, P, C); }, "logits");
  expect_invalid([&] { route(o, k, L, {}, i32(idx, {k, T}), P, C); }, "expert_idx");
  expect_invalid([&] { route(o, k, L, {}, I, f32(probs, {k, T}), C); }, "probs");
  auto P_half = P;
  P_half.dtype = DType::kBFloat16;
  expect_invalid([&] { route(o, k, L, {}, I, P_half, C); }, "probs");
  expect_invalid([&] { route(o, k, L, {}, I, P, i32(counts, {E - 1})); }, "counts");
  logits[5] = NAN;
  expect_invalid([&] { route(o, k, L, {}, I, P, C); }, "logits");
  logits[5] = 0.5f;

  route(o, k, L, {}, I, P, C);
  auto D = f32(dl, {T, E});
  EXPECT_NO_THROW(route_backward(o, k, L, I, C, P, D));
  expect_invalid([&] { route_backward(o, k, L, I, C, P, f32(dl, {E, T})); }, "d_logits");
  expect_invalid([&] { route_backward(o, k, L, I, C, f32(probs, {k, T}), D); }, "d_probs");
  auto counts_bad = counts;
  counts_bad[0] += 1;
  expect_invalid([&] { route_backward(o, k, L, I, i32(counts_bad, {E}), P, D); }, "counts");
  auto idx_bad = idx;
  idx_bad[1] = static_cast<int32_t>(E);
  expect_invalid([&] { route_backward(o, k, L, i32(idx_bad, {T, k}), C, P, D); }, "expert_idx");
  idx_bad = idx;
  idx_bad[1] = idx_bad[0];
  expect_invalid([&] { route_backward(o, k, L, i32(idx_bad, {T, k}), C, P, D); }, "expert_idx");

  expect_invalid([&] { ref::router_logits(f32(x, {T, H}), f32(w, {H, E}), L); }, "x");
  expect_invalid([&] { ref::router_logits(f32(x, {T, H}), f32(w, {E, H}), f32(logits, {E, T})); },
                 "logits");
  expect_invalid([&] { ref::router_logits(f32(x, {T, H}), TensorView{}, L); }, "w_router");
  expect_invalid(
      [&] { ref::router_logits_backward(f32(x, {T, H}), f32(w, {E, H}), D, f32(dx, {H, T}), f32(dw, {E, H})); },
      "dx_accumulate");
  expect_invalid(
      [&] { ref::router_logits_backward(f32(x, {T, H}), f32(w, {E, H}), D, f32(dx, {T, H}), f32(dw, {H, E})); },
      "d_w_router");
  expect_invalid(
      [&] { ref::router_logits_backward(f32(x, {T, H}), f32(w, {E, H}), f32(dl, {E, T}), f32(dx, {T, H}), f32(dw, {E, H})); },
      "d_logits");
}

}  // namespace
}  // namespace moefuse::test
