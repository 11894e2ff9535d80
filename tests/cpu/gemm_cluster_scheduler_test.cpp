// The 2-CTA work units of the FP8 GEMM and the bf16 dgrad (src/cuda/gemm/cluster_scheduler.h):
// every tile of every expert computed exactly once, both halves of a unit share the operand the
// kernel multicasts, and phantoms only where an expert has odd m- and n-block counts.
#include <gtest/gtest.h>

#include <map>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "common/test_util.h"
#include "cuda/gemm/cluster_scheduler.h"

namespace moefuse::gemm {
namespace {

void expect_units_cover_tiles(const std::vector<int>& offsets, const TileShape& s) {
  const int num_experts = static_cast<int>(offsets.size()) - 1;
  std::vector<int> unit_start(num_experts + 1);
  unit_starts(offsets.data(), num_experts, s, unit_start.data());
  std::map<std::tuple<int, int, int>, int> seen;
  int phantoms = 0, expected_phantoms = 0, tiles = 0;
  for (int e = 0; e < num_experts; ++e) {
    const int rows = offsets[e + 1] - offsets[e];
    const int m_blocks = rows <= 0 ? 0 : ceil_div(rows, s.block_m);
    tiles += m_blocks * s.n_blocks;
    expected_phantoms += (m_blocks % 2 == 1 && s.n_blocks % 2 == 1);
  }
  for (int u = 0; u < unit_start[num_experts]; ++u) {
    const UnitTile w0 = unit_tile(u, offsets.data(), unit_start.data(), num_experts, s, 0);
    const UnitTile w1 = unit_tile(u, offsets.data(), unit_start.data(), num_experts, s, 1);
    const std::string where = "unit " + std::to_string(u);
    ASSERT_TRUE(w0.live) << where << ": rank 0 always has a tile";
    ASSERT_EQ(w0.tile.expert, w1.tile.expert) << where;
    ASSERT_EQ(w0.share_a, w1.share_a) << where;
    if (w0.share_a) {
      ASSERT_EQ(w0.tile.m_block, w1.tile.m_block) << where << ": an n-pair shares A";
      ASSERT_EQ(w0.tile.n_block + 1, w1.tile.n_block) << where;
    } else {
      ASSERT_EQ(w0.tile.n_block, w1.tile.n_block) << where << ": an m-pair shares B";
      ASSERT_EQ(w0.tile.m_block + 1, w1.tile.m_block) << where;
      ASSERT_TRUE(w1.live) << where;
    }
    for (const UnitTile& w : {w0, w1}) {
      if (!w.live) {
        ++phantoms;
        ASSERT_EQ(w.tile.n_block, s.n_blocks) << where << ": a phantom sits past the last n-block";
        continue;
      }
      const int m_blocks = ceil_div(offsets[w.tile.expert + 1] - offsets[w.tile.expert], s.block_m);
      ASSERT_TRUE(w.tile.m_block >= 0 && w.tile.m_block < m_blocks) << where;
      ASSERT_TRUE(w.tile.n_block >= 0 && w.tile.n_block < s.n_blocks) << where;
      const auto key = std::make_tuple(w.tile.expert, w.tile.m_block, w.tile.n_block);
      ASSERT_EQ(++seen[key], 1)
          << where << ": tile (" << w.tile.expert << ", " << w.tile.m_block << ", "
          << w.tile.n_block << ") computed twice";
    }
  }
  EXPECT_EQ(static_cast<int>(seen.size()), tiles) << "every tile computed once";
  EXPECT_EQ(phantoms, expected_phantoms) << "one phantom per expert with odd m- and n-blocks";
}

TEST(GemmFp8ClusterScheduler, EvenAndOddBlockCounts) {
  for (int n_blocks : {1, 2, 3, 32}) {
    const TileShape s{.block_m = 128, .block_n = 128, .group_m = 8, .n_blocks = n_blocks};
    SCOPED_TRACE("n_blocks " + std::to_string(n_blocks));
    // Empty experts, one row, exact multiples, odd and even m-block counts, 17 m-blocks (a
    // partial raster group of pairs).
    expect_units_cover_tiles({0, 0, 1, 128, 129, 385, 385, 512 + 385, 2561, 2561 + 17 * 128}, s);
  }
}

TEST(GemmFp8ClusterScheduler, RandomRouting) {
  std::uniform_int_distribution<int> rows(0, 1500), blocks(1, 40);
  for (int trial = 0; trial < 20; ++trial) {
    std::vector<int> offsets = {0};
    for (int e = 0; e < 24; ++e) offsets.push_back(offsets.back() + rows(test::rng()));
    const TileShape s{.block_m = 128, .block_n = 128, .group_m = 8,
                      .n_blocks = blocks(test::rng())};
    SCOPED_TRACE("trial " + std::to_string(trial) + ", seed " + std::to_string(test::seed()));
    expect_units_cover_tiles(offsets, s);
  }
}

TEST(GemmFp8ClusterScheduler, MPairsFollowTheRasterOrder) {
  // 8 m-blocks, 3 n-blocks: the 12 units run n-block 0's 4 pairs, then n-block 1's, ...
  const std::vector<int> offsets = {0, 8 * 128};
  const TileShape s{.block_m = 128, .block_n = 128, .group_m = 8, .n_blocks = 3};
  std::vector<int> unit_start(2);
  unit_starts(offsets.data(), 1, s, unit_start.data());
  ASSERT_EQ(unit_start[1], 12);
  for (int u = 0; u < 12; ++u) {
    const UnitTile w = unit_tile(u, offsets.data(), unit_start.data(), 1, s, 1);
    EXPECT_EQ(w.tile.m_block, 2 * (u % 4) + 1) << "unit " << u;
    EXPECT_EQ(w.tile.n_block, u / 4) << "unit " << u;
  }
}

}  // namespace
}  // namespace moefuse::gemm
