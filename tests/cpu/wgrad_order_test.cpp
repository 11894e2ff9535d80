// The wgrads' tile order (src/cuda/gemm/backward/wgrad_order.h): a skewed load's experts longest
// first, tiles in snake rounds; the rule that says which loads are skewed.
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "bench/routing.h"
#include "common/test_util.h"
#include "cuda/gemm/backward/wgrad_order.h"

namespace moefuse::gemm::bwd {
namespace {

TEST(WgradOrder, RanksSortByRowsMostFirstTiesByIndex) {
  std::uniform_int_distribution<int> experts(1, 300), rows(0, 40);
  for (int trial = 0; trial < 40; ++trial) {
    const int e_count = experts(test::rng());
    std::vector<int> counts(e_count);
    for (int& c : counts) c = rows(test::rng());  // small range: many ties
    std::vector<int> order(e_count, -1);
    for (int e = 0; e < e_count; ++e) {
      const int r = longest_first_rank(counts.data(), e_count, e);
      ASSERT_TRUE(r >= 0 && r < e_count && order[r] == -1) << "rank " << r << " of expert " << e;
      order[r] = e;
    }
    std::vector<int> expected(e_count);
    std::iota(expected.begin(), expected.end(), 0);
    std::stable_sort(expected.begin(), expected.end(),
                     [&](int a, int b) { return counts[a] > counts[b]; });
    EXPECT_EQ(order, expected) << "trial " << trial;
  }
}

TEST(WgradOrder, SnakeRoundsGiveEveryTileToOneCta) {
  for (int ctas : {1, 2, 7, 132}) {
    for (int total : {0, 1, 5, 131, 132, 133, 1000}) {
      std::vector<int> owner(total, -1);
      for (int cta = 0; cta < ctas; ++cta) {
        for (int round = 0; round * ctas < total; ++round) {
          const int t = snake_tile(round, cta, ctas);
          ASSERT_TRUE(t >= round * ctas && t < (round + 1) * ctas);
          if (t >= total) continue;
          ASSERT_EQ(owner[t], -1) << "tile " << t << " twice";
          owner[t] = cta;
        }
      }
      EXPECT_EQ(std::count(owner.begin(), owner.end(), -1), 0) << ctas << " CTAs, " << total;
    }
  }
}

// What the order is for: the load of the busiest of 132 CTAs (a tile costs its expert's rows
// + 128, two 64-row K blocks of fill and drain) against the mean, with the benchmark's
// Zipf-routed qwen3-30b-a3b counts (T 16384, 128 experts, top-8: one expert ~15× the mean), for
// its dW1 (96 tiles an expert) and dW2 (64): index order leaves a CTA well above the mean,
// longest first in snake rounds close to it.
double busiest_over_mean(const std::vector<int32_t>& rows, int per_expert, bool longest_first) {
  const int ctas = 132, experts = static_cast<int>(rows.size()), total = experts * per_expert;
  std::vector<int> order(experts);
  for (int e = 0; e < experts; ++e)
    order[longest_first ? longest_first_rank(rows.data(), experts, e) : e] = e;
  std::vector<double> load(ctas, 0);
  for (int cta = 0; cta < ctas; ++cta)
    for (int round = 0; round * ctas < total; ++round) {
      const int t = longest_first ? snake_tile(round, cta, ctas) : round * ctas + cta;
      if (t < total) load[cta] += rows[order[t / per_expert]] + 128;
    }
  const double mean = std::accumulate(load.begin(), load.end(), 0.0) / ctas;
  return *std::max_element(load.begin(), load.end()) / mean;
}

TEST(WgradOrder, LongestFirstSnakeLevelsZipfLoads) {
  for (uint64_t seed : {1u, 2u, 3u}) {
    const bench::SyntheticRouting r =
        bench::draw_routing(16384, 128, 8, bench::RoutingDistribution::kZipf, seed);
    for (int per_expert : {96, 64}) {
      const double index_order = busiest_over_mean(r.counts, per_expert, false);
      const double longest_first = busiest_over_mean(r.counts, per_expert, true);
      SCOPED_TRACE("seed " + std::to_string(seed) + ", " + std::to_string(per_expert) +
                   " tiles an expert: index order " + std::to_string(index_order) +
                   ", longest first " + std::to_string(longest_first));
      EXPECT_GT(index_order, 1.05);
      EXPECT_LT(longest_first, 1.04);
    }
  }
}

// The kernels sort only a skewed load: the benchmark's uniform routing never, its Zipf routing
// always, at every preset's expert count and top-k.
TEST(WgradOrder, OnlySkewedLoadsAreSorted) {
  auto sorts = [](const bench::SyntheticRouting& r) {
    const int experts = static_cast<int>(r.counts.size());
    const int total = r.offsets.back();
    return std::any_of(r.counts.begin(), r.counts.end(),
                       [&](int c) { return long_expert(c, experts, total); });
  };
  const std::vector<std::pair<int, int>> presets{{128, 8}, {128, 4}, {8, 2}, {32, 4}};
  for (auto [experts, top_k] : presets) {
    SCOPED_TRACE(std::to_string(experts) + " experts, top-" + std::to_string(top_k));
    EXPECT_FALSE(sorts(bench::draw_routing(16384, experts, top_k,
                                           bench::RoutingDistribution::kUniform, 7)));
    EXPECT_TRUE(sorts(bench::draw_routing(16384, experts, top_k,
                                          bench::RoutingDistribution::kZipf, 7)));
  }
  EXPECT_FALSE(long_expert(2, 4, 4));  // twice the mean is not yet long
  EXPECT_TRUE(long_expert(3, 4, 5));
}

}  // namespace
}  // namespace moefuse::gemm::bwd
