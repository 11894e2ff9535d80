// The grouped GEMM tile scheduler against a brute-force enumeration of the same order.
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "common/test_util.h"
#include "cuda/gemm/tile_scheduler.h"

namespace moefuse::gemm {
namespace {

// The order spelled out as nested loops: experts, raster groups of m-blocks, n-blocks, m-blocks.
std::vector<TileCoord> brute_force_order(const std::vector<int>& offsets, const TileShape& s) {
  std::vector<TileCoord> order;
  const int num_experts = static_cast<int>(offsets.size()) - 1;
  for (int e = 0; e < num_experts; ++e) {
    const int rows = offsets[e + 1] - offsets[e];
    const int m_blocks = rows <= 0 ? 0 : (rows + s.block_m - 1) / s.block_m;
    for (int first = 0; first < m_blocks; first += s.group_m)
      for (int n = 0; n < s.n_blocks; ++n)
        for (int m = first; m < std::min(first + s.group_m, m_blocks); ++m)
          order.push_back({.expert = e, .m_block = m, .n_block = n});
  }
  return order;
}

void expect_schedule_matches(const std::vector<int>& offsets, const TileShape& s) {
  const int num_experts = static_cast<int>(offsets.size()) - 1;
  std::vector<int> tile_start(num_experts + 1);
  tile_starts(offsets.data(), num_experts, s, tile_start.data());
  const std::vector<TileCoord> expected = brute_force_order(offsets, s);
  ASSERT_EQ(tile_start[num_experts], static_cast<int>(expected.size()));
  for (int t = 0; t < tile_start[num_experts]; ++t) {
    const TileCoord c = tile_coord(t, offsets.data(), tile_start.data(), num_experts, s);
    const TileCoord& w = expected[t];
    ASSERT_TRUE(c.expert == w.expert && c.m_block == w.m_block && c.n_block == w.n_block)
        << "tile " << t << ": got (" << c.expert << ", " << c.m_block << ", " << c.n_block
        << "), want (" << w.expert << ", " << w.m_block << ", " << w.n_block << ")";
  }
}

std::vector<int> offsets_from_counts(const std::vector<int>& counts) {
  std::vector<int> offsets(counts.size() + 1, 0);
  for (size_t e = 0; e < counts.size(); ++e) offsets[e + 1] = offsets[e] + counts[e];
  return offsets;
}

TEST(GemmScheduler, RandomCountsWithEmptyExperts) {
  std::uniform_int_distribution<int> num_experts_dist(1, 512), count_dist(0, 2600), coin(0, 3);
  for (int trial = 0; trial < 30; ++trial) {
    const int num_experts = num_experts_dist(test::rng());
    std::vector<int> counts(num_experts);
    for (int& c : counts) c = coin(test::rng()) == 0 ? 0 : count_dist(test::rng());
    // Raster groups of 1-9 m-blocks; in trials 9, 19 and 29 of 16, the kernels' (kGroupM).
    const int group_m = trial % 10 == 9 ? 16 : 1 + trial % 9;
    const TileShape s{.block_m = 128, .block_n = 256, .group_m = group_m,
                      .n_blocks = 1 + trial % 7};
    SCOPED_TRACE("trial " + std::to_string(trial) + ", E = " + std::to_string(num_experts));
    expect_schedule_matches(offsets_from_counts(counts), s);
  }
}

TEST(GemmScheduler, OneExpertHoldsAllRows) {
  for (int hot : {0, 5, 63}) {
    std::vector<int> counts(64, 0);
    counts[hot] = 4097;
    expect_schedule_matches(offsets_from_counts(counts),
                            {.block_m = 128, .block_n = 256, .group_m = 8, .n_blocks = 3});
  }
}

TEST(GemmScheduler, NoRowsAtAllHasNoTiles) {
  const std::vector<int> offsets(129, 37);  // a nonzero base: only differences matter
  std::vector<int> tile_start(129);
  const TileShape s{.block_m = 128, .block_n = 256, .group_m = 8, .n_blocks = 6};
  tile_starts(offsets.data(), 128, s, tile_start.data());
  EXPECT_EQ(tile_start[128], 0);
}

TEST(GemmScheduler, RowsNotMultipleOfTheTile) {
  expect_schedule_matches(offsets_from_counts({1, 127, 128, 129, 255, 0, 257}),
                          {.block_m = 128, .block_n = 128, .group_m = 2, .n_blocks = 5});
}

TEST(GemmScheduler, FindExpertSkipsEmptyExperts) {
  // Experts 1 and 2 are empty; tile 4 is the first tile of expert 3.
  const int tile_start[] = {0, 4, 4, 4, 6};
  EXPECT_EQ(find_expert(tile_start, 4, 0), 0);
  EXPECT_EQ(find_expert(tile_start, 4, 3), 0);
  EXPECT_EQ(find_expert(tile_start, 4, 4), 3);
  EXPECT_EQ(find_expert(tile_start, 4, 5), 3);
}

}  // namespace
}  // namespace moefuse::gemm
