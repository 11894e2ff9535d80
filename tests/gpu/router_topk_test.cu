// GPU fused router vs the CPU reference: every router kind, E 1..512, k 1..16, T 0..4096, ties,
// all tokens alike, non-finite logits, bitwise repeatability.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "common/test_util.h"
#include "moefuse/health.h"
#include "moefuse/router.h"
#include "ref/router.h"
#include "gpu/dispatch_test_util.h"

namespace moefuse {
namespace {

using test::DeviceBuffer;

enum class Logits { kRandom, kQuantised, kSameForAllTokens };

RouterOptions options_for(RouterKind kind, int64_t E, bool renormalize) {
  RouterOptions o{.kind = kind, .renormalize = renormalize, .routed_scaling_factor = 1.5f,
                  .aux_loss_coeff = 0.01f, .z_loss_coeff = 0.001f};
  if (kind == RouterKind::kSigmoidGroupTopK) {
    o.use_score_bias = true;
    if (E >= 64) o.num_groups = 8, o.topk_groups = 4;
  }
  return o;
}

std::vector<float> make_logits(int64_t T, int64_t E, Logits kind) {
  std::vector<float> v = test::random_normal(T * E, 2.0f);
  if (kind == Logits::kQuantised)
    for (auto& x : v) x = std::round(x);  // few distinct values: many ties
  if (kind == Logits::kSameForAllTokens)
    for (int64_t t = 1; t < T; ++t) std::copy(v.begin(), v.begin() + E, v.begin() + t * E);
  return v;
}

struct GpuRouting {
  std::vector<int32_t> idx, counts;
  std::vector<float> probs, f, P, losses;
};

GpuRouting run_gpu(const RouterOptions& o, int64_t k, int64_t T, int64_t E,
                   const std::vector<float>& logits, const std::vector<float>& bias,
                   int32_t* health_bits = nullptr) {
  DeviceBuffer<float> d_logits(logits), d_bias(bias), probs(T * k), f(E), P(E), losses(2);
  DeviceBuffer<int32_t> idx(T * k), counts(E), health(1);
  for (auto* b : {&probs, &f, &P, &losses}) b->poison();
  idx.poison(0x7F), counts.poison(0x7F);
  DeviceBuffer<unsigned char> ws(router_topk_workspace_size(T, E));
  ws.poison();
  const auto health_view = health.view(DType::kInt32, {1});
  reset_health_flags(health_view, nullptr);
  router_topk(o, k, d_logits.view(DType::kFloat32, {T, E}),
              o.use_score_bias ? d_bias.view(DType::kFloat32, {E}) : TensorView{},
              RouterOutputs{.expert_idx = idx.view(DType::kInt32, {T, k}),
                            .probs = probs.view(DType::kFloat32, {T, k}),
                            .counts = counts.view(DType::kInt32, {E}),
                            .aux_f = f.view(DType::kFloat32, {E}),
                            .aux_P = P.view(DType::kFloat32, {E}),
                            .losses = losses.view(DType::kFloat32, {2})},
              health_view, Workspace{.data = ws.data(), .bytes = ws.size()}, nullptr);
  const int32_t bits = read_health_flags(health_view, nullptr);
  if (health_bits) *health_bits = bits;
  return {.idx = idx.download(), .counts = counts.download(), .probs = probs.download(),
          .f = f.download(), .P = P.download(), .losses = losses.download()};
}

double rel(double got, double want) {
  return std::abs(got - want) / std::max(std::abs(want), 1e-30);
}

void check_against_reference(RouterKind kind, bool renormalize, Logits logits_kind) {
  for (int64_t E : {1, 7, 64, 128, 256, 512}) {
    for (int64_t k : {1, 2, 8, 16}) {
      if (k > E) continue;
      for (int64_t T : {0, 1, 37, 4096}) {
        const RouterOptions o = options_for(kind, E, renormalize);
        SCOPED_TRACE("E=" + std::to_string(E) + " k=" + std::to_string(k) +
                     " T=" + std::to_string(T) + " seed=" + std::to_string(test::seed()));
        std::vector<float> logits = make_logits(T, E, logits_kind);
        std::vector<float> bias = test::random_normal(E, 0.1f);
        if (logits_kind == Logits::kQuantised)
          for (auto& b : bias) b = std::round(b * 10) / 40;  // ties in s + bias too
        std::vector<int32_t> idx(T * k), counts(E);
        std::vector<float> probs(T * k);
        const ref::RouterLosses want = ref::route(
            o, k, test::host_view(logits, DType::kFloat32, {T, E}),
            o.use_score_bias ? test::host_view(bias, DType::kFloat32, {E}) : TensorView{},
            test::host_view(idx, DType::kInt32, {T, k}),
            test::host_view(probs, DType::kFloat32, {T, k}),
            test::host_view(counts, DType::kInt32, {E}));
        int32_t health = -1;
        const GpuRouting got = run_gpu(o, k, T, E, logits, bias, &health);
        EXPECT_EQ(health, 0);
        ASSERT_TRUE(test::same_bits(got.idx, idx, "expert_idx"));
        ASSERT_TRUE(test::same_bits(got.counts, counts, "counts"));
        EXPECT_LE(test::rel_norm_error(got.probs, probs), 2e-6);
        std::vector<float> f(want.f.begin(), want.f.end()), P(want.P.begin(), want.P.end());
        EXPECT_LE(test::rel_norm_error(got.f, f), 1e-6);
        EXPECT_LE(test::rel_norm_error(got.P, P), 2e-5);
        EXPECT_LE(rel(got.losses[0], want.aux_loss), 2e-5) << got.losses[0] << " vs " << want.aux_loss;
        EXPECT_LE(rel(got.losses[1], want.z_loss), 2e-5) << got.losses[1] << " vs " << want.z_loss;
        if (testing::Test::HasFatalFailure()) return;
      }
    }
  }
}

TEST(RouterTopk, SoftmaxRenormalisedMatchesReference) {
  MOEFUSE_REQUIRE_HOPPER();
  check_against_reference(RouterKind::kSoftmaxTopK, true, Logits::kRandom);
}

TEST(RouterTopk, SoftmaxPlainMatchesReference) {
  MOEFUSE_REQUIRE_HOPPER();
  check_against_reference(RouterKind::kSoftmaxTopK, false, Logits::kRandom);
}

TEST(RouterTopk, SigmoidGroupLimitedWithBiasMatchesReference) {
  MOEFUSE_REQUIRE_HOPPER();
  check_against_reference(RouterKind::kSigmoidGroupTopK, true, Logits::kRandom);
}

TEST(RouterTopk, TiesFollowTheLowerIndexRule) {
  MOEFUSE_REQUIRE_HOPPER();
  check_against_reference(RouterKind::kSoftmaxTopK, true, Logits::kQuantised);
  check_against_reference(RouterKind::kSigmoidGroupTopK, false, Logits::kQuantised);
}

// -0 and +0 are equal scores (the lower index first), and a NaN ranks below -inf (the key rule
// of cuda/router/ordered_key.h): every token ranks all E experts, the expected order written out.
TEST(RouterTopk, SignedZerosTieAndNaNRanksLast) {
  MOEFUSE_REQUIRE_HOPPER();
  for (int64_t E : {8, 40}) {
    SCOPED_TRACE("E=" + std::to_string(E));
    const int64_t T = 37, k = std::min<int64_t>(E, 16);
    std::vector<float> logits(T * E);
    std::vector<int32_t> want(T * k);
    for (int64_t t = 0; t < T; ++t) {
      float* row = logits.data() + t * E;
      std::vector<int32_t> order;  // the expected rank order
      const int64_t lo = t % (E - 2), hi = lo + 1 + t % (E - 1 - lo);  // -0 at lo < hi: +0
      for (int64_t e = 0; e < E; ++e) row[e] = -1.0f - static_cast<float>(e);  // distinct, below 0
      row[lo] = -0.0f, row[hi] = 0.0f;
      order = {static_cast<int32_t>(lo), static_cast<int32_t>(hi)};
      for (int64_t e = 0; e < E; ++e)
        if (e != lo && e != hi) order.push_back(static_cast<int32_t>(e));
      if (t % 2) {  // a NaN on the best finite expert after the zeros: it moves to the end
        const int32_t n = order[2];
        row[n] = NAN;
        order.erase(order.begin() + 2);
        order.push_back(n);
      }
      std::copy(order.begin(), order.begin() + k, want.begin() + t * k);
    }
    int32_t health = 0;
    const GpuRouting got =
        run_gpu(options_for(RouterKind::kSoftmaxTopK, E, true), k, T, E, logits, {}, &health);
    EXPECT_TRUE(test::same_bits(got.idx, want, "expert_idx"));
    EXPECT_EQ(health & kHealthNonFiniteLogit, kHealthNonFiniteLogit);
  }
}

TEST(RouterTopk, AllTokensChooseTheSameExperts) {
  MOEFUSE_REQUIRE_HOPPER();
  check_against_reference(RouterKind::kSoftmaxTopK, true, Logits::kSameForAllTokens);
  check_against_reference(RouterKind::kSigmoidGroupTopK, true, Logits::kSameForAllTokens);
}

TEST(RouterTopk, PresetsMatchReference) {
  MOEFUSE_REQUIRE_HOPPER();
  for (auto name : preset_names()) {
    const MoeConfig c = preset(name);
    SCOPED_TRACE(std::string(name));
    const int64_t T = 1000, E = c.num_experts, k = c.top_k;
    std::vector<float> logits = make_logits(T, E, Logits::kRandom), bias = test::random_normal(E, 0.1f);
    std::vector<int32_t> idx(T * k), counts(E);
    std::vector<float> probs(T * k);
    ref::route(c.router, k, test::host_view(logits, DType::kFloat32, {T, E}),
               c.router.use_score_bias ? test::host_view(bias, DType::kFloat32, {E}) : TensorView{},
               test::host_view(idx, DType::kInt32, {T, k}), test::host_view(probs, DType::kFloat32, {T, k}),
               test::host_view(counts, DType::kInt32, {E}));
    const GpuRouting got = run_gpu(c.router, k, T, E, logits, bias);
    EXPECT_TRUE(test::same_bits(got.idx, idx, "expert_idx"));
    EXPECT_TRUE(test::same_bits(got.counts, counts, "counts"));
    EXPECT_LE(test::rel_norm_error(got.probs, probs), 2e-6);
  }
}

TEST(RouterTopk, BitwiseRepeatable) {
  MOEFUSE_REQUIRE_HOPPER();
  for (RouterKind kind : {RouterKind::kSoftmaxTopK, RouterKind::kSigmoidGroupTopK}) {
    const int64_t T = 4096, E = 256, k = 8;
    const RouterOptions o = options_for(kind, E, true);
    const auto logits = make_logits(T, E, Logits::kRandom);
    const auto bias = test::random_normal(E, 0.1f);
    const GpuRouting a = run_gpu(o, k, T, E, logits, bias), b = run_gpu(o, k, T, E, logits, bias);
    EXPECT_TRUE(test::same_bits(a.idx, b.idx, "expert_idx"));
    EXPECT_TRUE(test::same_bits(a.probs, b.probs, "probs"));
    EXPECT_TRUE(test::same_bits(a.P, b.P, "aux_P"));
    EXPECT_TRUE(test::same_bits(a.losses, b.losses, "losses"));
  }
}

TEST(RouterTopk, NonFiniteLogitSetsTheHealthFlag) {
  MOEFUSE_REQUIRE_HOPPER();
  const int64_t T = 37, E = 64, k = 4;
  auto logits = make_logits(T, E, Logits::kRandom);
  logits[5 * E + 17] = NAN;
  int32_t bits = 0;
  run_gpu(options_for(RouterKind::kSoftmaxTopK, E, true), k, T, E, logits, {}, &bits);
  EXPECT_EQ(bits & kHealthNonFiniteLogit, kHealthNonFiniteLogit);
  logits[5 * E + 17] = -INFINITY;
  run_gpu(options_for(RouterKind::kSigmoidGroupTopK, E, true), k, T, E, logits,
          test::random_normal(E, 0.1f), &bits);
  EXPECT_EQ(bits & kHealthNonFiniteLogit, kHealthNonFiniteLogit);
}

}  // namespace
}  // namespace moefuse
