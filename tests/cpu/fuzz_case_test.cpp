// The fuzz harness's case generator (common/fuzz_case.h): deterministic from (seed, case),
// within every bound, covering every routing distribution and kind over a few hundred cases, and
// its data routes as the case says through the CPU reference router.
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <set>
#include <string>
#include <vector>

#include "common/fuzz_case.h"
#include "common/test_util.h"
#include "ref/router.h"

namespace moefuse::test {
namespace {

constexpr int64_t kCases = 400;

TEST(FuzzCase, IsDeterministicFromSeedAndCase) {
  const uint64_t s = seed();
  for (int64_t i = 0; i < 20; ++i) {
    const FuzzCase a = draw_fuzz_case(s, i), b = draw_fuzz_case(s, i);
    EXPECT_EQ(describe(a), describe(b)) << i;
    EXPECT_EQ(a.logit_offset, b.logit_offset) << i;
    EXPECT_EQ(repro_command(a), "moefuse-fuzz --seed " + std::to_string(s) + " --case " +
                                    std::to_string(i));
  }
  EXPECT_NE(describe(draw_fuzz_case(s, 0)), describe(draw_fuzz_case(s + 1, 0)));
  // The data too: two draws of a small case agree bit for bit, the router inputs drawn alone
  // equal those drawn with everything.
  for (int64_t i = 0;; ++i) {
    const FuzzCase fc = draw_fuzz_case(s, i);
    if (param_count(fc.config) > 1e6 || fc.tokens * fc.config.hidden > 1e6) continue;
    const LayerData a = fuzz_layer_data(fc), b = fuzz_layer_data(fc);
    const LayerData r = fuzz_router_inputs(fc);
    EXPECT_EQ(a.x, b.x);
    EXPECT_EQ(a.w1, b.w1);
    EXPECT_EQ(a.dy, b.dy);
    EXPECT_EQ(a.x, r.x);
    EXPECT_EQ(a.w_router, r.w_router);
    EXPECT_EQ(a.score_bias, r.score_bias);
    break;
  }
}

// T = 0 is a case the harness draws: its data must draw too, with every activation and bias
// (ReGLU's gate guard once routed an empty x and threw: CI, session 50).
TEST(FuzzCase, CasesWithoutTokensDrawTheirData) {
  const uint64_t s = seed();
  int64_t i = 0;  // the first case small enough to draw quickly
  while (param_count(draw_fuzz_case(s, i).config) > 1e6)
    ASSERT_LT(++i, kCases) << "no case of at most 1e6 parameters in " << kCases << " draws";
  FuzzCase fc = draw_fuzz_case(s, i);
  fc.tokens = 0;
  for (Activation a : {Activation::kSwiGLU, Activation::kGeGLU, Activation::kReGLU,
                       Activation::kSquaredReLU, Activation::kClampedSwiGLU}) {
    for (bool bias : {false, true}) {
      fc.config.activation = a, fc.config.expert_bias = bias;
      SCOPED_TRACE(describe(fc));
      const LayerData d = fuzz_layer_data(fc);
      EXPECT_TRUE(d.x.empty() && d.dy.empty());
      EXPECT_EQ(d.w1.size(),
                size_t(fc.config.num_experts * fc.config.fc1_width() * fc.config.hidden));
      EXPECT_EQ(d.b1.size(), bias ? size_t(fc.config.num_experts * fc.config.fc1_width()) : 0);
    }
  }
}

TEST(FuzzCase, RespectsEveryBound) {
  const uint64_t s = seed();
  for (int64_t i = 0; i < kCases; ++i) {
    const FuzzCase fc = draw_fuzz_case(s, i);
    const MoeConfig& c = fc.config;
    SCOPED_TRACE(repro_command(fc) + "  " + describe(fc));
    EXPECT_NO_THROW(c.validate());
    EXPECT_TRUE(c.hidden % 64 == 0 && c.hidden >= 64 && c.hidden <= kFuzzMaxHidden);
    EXPECT_TRUE(c.ffn % 64 == 0 && c.ffn >= 64 && c.ffn <= kFuzzMaxFfn);
    EXPECT_TRUE(c.shared_expert_ffn % 64 == 0 && c.shared_expert_ffn <= kFuzzMaxFfn);
    EXPECT_TRUE(c.num_experts >= 1 && c.num_experts <= kFuzzMaxExperts);
    EXPECT_TRUE(c.top_k >= 1 && c.top_k <= std::min(kFuzzMaxTopK, c.num_experts));
    EXPECT_TRUE(c.router.kind == RouterKind::kSoftmaxTopK || c.router.num_groups <= 32);
    EXPECT_EQ(c.precision, PrecisionRecipe::kBF16);
    EXPECT_TRUE(fc.tokens >= 0 && fc.tokens <= kFuzzMaxTokens);
    EXPECT_LE(reference_macs(c, fc.tokens), kMaxReferenceMacs);
    EXPECT_LE(param_count(c), kMaxParams);
    EXPECT_EQ(fc.logit_offset.size(),
              fc.routing == FuzzRouting::kUniform ? 0u : size_t(c.num_experts));
  }
}

TEST(FuzzCase, CoversEveryDistributionAndKind) {
  const uint64_t s = seed();
  std::set<int> routings, activations, routers, modes;
  const int64_t cases = 2 * kCases;  // rarer features (T >= 16384, E >= 256) need more draws
  int bias = 0, shared = 0, recompute = 0, score_bias = 0, no_tokens = 0, many_tokens = 0,
      wide = 0, many_experts = 0, top16 = 0;
  for (int64_t i = 0; i < cases; ++i) {
    const FuzzCase fc = draw_fuzz_case(s, i);
    const MoeConfig& c = fc.config;
    routings.insert(int(fc.routing));
    activations.insert(int(c.activation));
    routers.insert(int(c.router.kind));
    modes.insert(int(fc.options.mode));
    bias += c.expert_bias;
    shared += c.shared_expert_ffn > 0;
    recompute += fc.options.recompute_pre;
    score_bias += c.router.use_score_bias;
    no_tokens += fc.tokens == 0;
    many_tokens += fc.tokens >= 16384;
    wide += c.hidden >= 2048 || c.ffn >= 4096;
    many_experts += c.num_experts >= 256;
    top16 += c.top_k >= 9;
  }
  EXPECT_EQ(routings.size(), size_t(kFuzzRoutingCount));
  EXPECT_EQ(activations.size(), 5u);
  EXPECT_EQ(routers.size(), 2u);
  EXPECT_EQ(modes.size(), 2u);
  for (int n : {bias, shared, recompute, score_bias, no_tokens, many_tokens, wide, many_experts,
                top16})
    EXPECT_GT(n, 0) << "bias " << bias << ", shared " << shared << ", recompute " << recompute
                    << ", score_bias " << score_bias << ", T=0 " << no_tokens << ", T>=16384 "
                    << many_tokens << ", wide " << wide << ", E>=256 " << many_experts
                    << ", k>=9 " << top16;
}

// Expert counts of the case's router inputs through the CPU reference router.
std::vector<int32_t> route_counts(const LayerData& d) {
  const MoeConfig& c = d.c;
  const int64_t T = d.T, E = c.num_experts, H = c.hidden, k = c.top_k;
  LayerData in = d;
  std::vector<float> logits(T * E), probs(T * k);
  std::vector<int32_t> idx(T * k), counts(E);
  ref::router_logits(TensorView::contiguous(in.x.data(), DType::kFloat32, {T, H}),
                     TensorView::contiguous(in.w_router.data(), DType::kFloat32, {E, H}),
                     TensorView::contiguous(logits.data(), DType::kFloat32, {T, E}));
  ref::route(c.router, k, TensorView::contiguous(logits.data(), DType::kFloat32, {T, E}),
             in.score_bias.empty()
                 ? TensorView{}
                 : TensorView::contiguous(in.score_bias.data(), DType::kFloat32, {E}),
             TensorView::contiguous(idx.data(), DType::kInt32, {T, k}),
             TensorView::contiguous(probs.data(), DType::kFloat32, {T, k}),
             TensorView::contiguous(counts.data(), DType::kInt32, {E}));
  return counts;
}

// The routing each distribution promises, on the case's own data (T cut so that the logits
// cost at most 2^23 multiply-adds: every promise is per token).
TEST(FuzzCase, DataRoutesAsTheDistributionSays) {
  const uint64_t s = seed();
  int checked[kFuzzRoutingCount] = {};
  for (int64_t i = 0; i < 240; ++i) {
    FuzzCase fc = draw_fuzz_case(s, i);
    const MoeConfig& c = fc.config;
    const int64_t E = c.num_experts, k = c.top_k;
    fc.tokens = std::min<int64_t>({fc.tokens, 2048, std::max<int64_t>(1, (1 << 23) / (E * c.hidden))});
    const int64_t T = fc.tokens;
    SCOPED_TRACE(repro_command(fc) + " (T cut to " + std::to_string(T) + ")  " + describe(fc));
    const std::vector<int32_t> counts = route_counts(fuzz_router_inputs(fc));
    const std::vector<float>& off = fc.logit_offset;
    const double mean = double(T * k) / double(E);
    // The statistical promises (uniform, Zipf) hold for the logits alone: a score bias shifts
    // the selection on purpose (E 364, k 3, 360 tokens, "uniform": one expert took 73 against a
    // mean of 3). The exact ones (one expert, half empty) are built to hold through the bias.
    const bool biased = c.router.use_score_bias;
    switch (fc.routing) {
      case FuzzRouting::kUniform: {
        // No expert far above its share; most experts used once each has tokens to expect.
        if (biased) break;
        const int32_t most = *std::max_element(counts.begin(), counts.end());
        EXPECT_LE(most, 16 * mean + 16);
        if (mean >= 32)
          EXPECT_GE(std::count_if(counts.begin(), counts.end(), [](int32_t n) { return n > 0; }),
                    E / 2);
        break;
      }
      case FuzzRouting::kZipf: {
        // The most popular quarter of the ranks takes over twice what the least popular does.
        // Not when a group-limited router confines each token to a few groups: it then picks
        // nearly every expert of the winning groups whatever their ranks (E 216, 1 of 18
        // groups, k 11: 11 of the group's 12 experts).
        const bool confined = c.router.kind == RouterKind::kSigmoidGroupTopK &&
                              c.router.topk_groups < c.router.num_groups;
        if (E < 8 || k > E / 4 || T < 256 || confined || biased) break;
        std::vector<int64_t> by_rank(E);
        std::iota(by_rank.begin(), by_rank.end(), 0);
        std::stable_sort(by_rank.begin(), by_rank.end(),
                         [&](int64_t a, int64_t b) { return off[a] > off[b]; });
        int64_t top = 0, bottom = 0;
        for (int64_t r = 0; r < E / 4; ++r) top += counts[by_rank[r]], bottom += counts[by_rank[E - 1 - r]];
        EXPECT_GT(top, 2 * bottom);
        break;
      }
      case FuzzRouting::kOneExpert: {
        const int64_t hot = std::max_element(off.begin(), off.end()) - off.begin();
        EXPECT_EQ(counts[hot], T) << "hot expert " << hot;
        break;
      }
      case FuzzRouting::kHalfEmpty: {
        const int64_t groups =
            c.router.kind == RouterKind::kSigmoidGroupTopK ? c.router.num_groups : 1;
        int64_t empty = 0;
        for (int64_t e = 0; e < E; ++e) {
          if (off[e] != kEmptyExpertOffset) continue;
          ++empty;
          EXPECT_EQ(counts[e], 0) << "expert " << e << " should be empty";
        }
        EXPECT_EQ(empty, groups * (E / groups / 2));
        break;
      }
    }
    ++checked[int(fc.routing)];
  }
  for (int r = 0; r < kFuzzRoutingCount; ++r)
    EXPECT_GT(checked[r], 10) << fuzz_routing_name(FuzzRouting(r));
}

}  // namespace
}  // namespace moefuse::test
