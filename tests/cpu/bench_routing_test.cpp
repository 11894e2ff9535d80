// The benchmarks' synthetic routing (tools/bench/routing.h): every distribution gives each token
// k distinct experts and maps that agree with its counts; "balanced" gives every expert the same
// count, which the GEMM benchmarks use to time the experts without partial m-blocks.
#include "bench/routing.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <set>
#include <string>
#include <tuple>

#include "moefuse/error.h"

namespace moefuse::bench {
namespace {

void expect_consistent(const SyntheticRouting& r, int64_t tokens, int64_t experts, int64_t k) {
  ASSERT_EQ(r.counts.size(), static_cast<size_t>(experts));
  EXPECT_EQ(std::accumulate(r.counts.begin(), r.counts.end(), int64_t{0}), tokens * k);
  for (int64_t t = 0; t < tokens; ++t) {
    const auto first = r.expert_idx.begin() + t * k;
    const std::set<int32_t> picked(first, first + k);
    ASSERT_EQ(picked.size(), static_cast<size_t>(k)) << "token " << t << ": k distinct experts";
    for (int64_t j = 0; j < k; ++j) {
      const int32_t e = r.expert_idx[t * k + j], row = r.row_of[t * k + j];
      ASSERT_GE(row, r.offsets[e]) << "token " << t;
      ASSERT_LT(row, r.offsets[e + 1]) << "token " << t;
      ASSERT_EQ(r.token_of_row[row], t);
    }
  }
}

TEST(BenchRouting, BalancedGivesEveryExpertTheSameCount) {
  // gpt-oss's and qwen3's shapes: 512 and 1024 rows an expert, whole 128-row m-blocks.
  for (const auto [tokens, experts, k] : {std::tuple<int64_t, int64_t, int64_t>{16384, 128, 4},
                                          {16384, 128, 8}, {1000, 32, 4}}) {
    const SyntheticRouting r =
        draw_routing(tokens, experts, k, RoutingDistribution::kBalanced, /*seed=*/7);
    expect_consistent(r, tokens, experts, k);
    const auto [lo, hi] = std::minmax_element(r.counts.begin(), r.counts.end());
    EXPECT_LE(*hi - *lo, 1) << "T " << tokens << ", E " << experts;
    if (tokens * k % experts == 0) EXPECT_EQ(*lo, tokens * k / experts);
  }
}

TEST(BenchRouting, UniformAndZipfAreConsistentAndZipfIsSkewed) {
  const SyntheticRouting u = draw_routing(4096, 64, 4, RoutingDistribution::kUniform, 1);
  const SyntheticRouting z = draw_routing(4096, 64, 4, RoutingDistribution::kZipf, 1);
  expect_consistent(u, 4096, 64, 4);
  expect_consistent(z, 4096, 64, 4);
  EXPECT_GT(*std::max_element(z.counts.begin(), z.counts.end()),
            2 * *std::max_element(u.counts.begin(), u.counts.end()));
}

TEST(BenchRouting, ParsesTheThreeNamesAndNamesTheOptionOtherwise) {
  EXPECT_EQ(parse_routing("uniform"), RoutingDistribution::kUniform);
  EXPECT_EQ(parse_routing("zipf"), RoutingDistribution::kZipf);
  EXPECT_EQ(parse_routing("balanced"), RoutingDistribution::kBalanced);
  try {
    parse_routing("even");
    FAIL() << "expected InvalidArgument";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("--routing"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("balanced"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace moefuse::bench
