// The work units of the clustered kernels (src/cuda/gemm/cluster_scheduler.h): pairs, which the
// FP8 GEMM, the bf16 forward and the bf16 dGLU dgrad run, and fours, which the arithmetic allows
// (the dGLU dgrad in fours measured slower in run 18). Every tile of every expert computed exactly
// once, all ranks of a unit share the operand the kernel multicasts, and phantoms only past the
// last n-block of an expert's left-over m-blocks (of every m-block with UnitPairs::kNGroupsOnly,
// the FP8 GEMM's E4M3 GLU output).
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

// Every tile of every expert computed once by the kCluster ranks of the units, the units' shared
// operand the same in every rank, phantoms only past the last n-block of left-over m-blocks, and
// max_units an upper bound of the count.
template <int kCluster>
void expect_units_cover_tiles(const std::vector<int>& offsets, const TileShape& s,
                              UnitPairs pairs = UnitPairs::kMGroupsFirst) {
  const bool n_only = pairs == UnitPairs::kNGroupsOnly;
  const int num_experts = static_cast<int>(offsets.size()) - 1;
  std::vector<int> unit_start(num_experts + 1);
  unit_starts<kCluster>(offsets.data(), num_experts, s, unit_start.data(), pairs);
  std::map<std::tuple<int, int, int>, int> seen;
  int phantoms = 0, expected_phantoms = 0, tiles = 0;
  const int padded_n = ceil_div(s.n_blocks, kCluster) * kCluster;
  for (int e = 0; e < num_experts; ++e) {
    const int rows = offsets[e + 1] - offsets[e];
    const int m_blocks = rows <= 0 ? 0 : ceil_div(rows, s.block_m);
    tiles += m_blocks * s.n_blocks;
    expected_phantoms += (n_only ? m_blocks : m_blocks % kCluster) * (padded_n - s.n_blocks);
  }
  if (!n_only) EXPECT_LE(unit_start[num_experts], max_units<kCluster>(tiles, num_experts));
  for (int u = 0; u < unit_start[num_experts]; ++u) {
    std::vector<UnitTile> w;
    for (int r = 0; r < kCluster; ++r)
      w.push_back(
          unit_tile<kCluster>(u, offsets.data(), unit_start.data(), num_experts, s, r, pairs));
    const std::string where = "unit " + std::to_string(u);
    ASSERT_TRUE(w[0].live) << where << ": rank 0 always has a tile";
    if (n_only) ASSERT_TRUE(w[0].share_a) << where << ": only n-groups";
    for (int r = 1; r < kCluster; ++r) {
      ASSERT_EQ(w[r].tile.expert, w[0].tile.expert) << where;
      ASSERT_EQ(w[r].share_a, w[0].share_a) << where;
      if (w[0].share_a) {
        ASSERT_EQ(w[r].tile.m_block, w[0].tile.m_block) << where << ": an n-group shares A";
        ASSERT_EQ(w[r].tile.n_block, w[0].tile.n_block + r) << where;
      } else {
        ASSERT_EQ(w[r].tile.n_block, w[0].tile.n_block) << where << ": an m-group shares B";
        ASSERT_EQ(w[r].tile.m_block, w[0].tile.m_block + r) << where;
        ASSERT_TRUE(w[r].live) << where;
      }
    }
    for (const UnitTile& t : w) {
      if (!t.live) {
        ++phantoms;
        ASSERT_GE(t.tile.n_block, s.n_blocks) << where << ": a phantom sits past the last n-block";
        continue;
      }
      const int m_blocks = ceil_div(offsets[t.tile.expert + 1] - offsets[t.tile.expert], s.block_m);
      ASSERT_TRUE(t.tile.m_block >= 0 && t.tile.m_block < m_blocks) << where;
      ASSERT_TRUE(t.tile.n_block >= 0 && t.tile.n_block < s.n_blocks) << where;
      const auto key = std::make_tuple(t.tile.expert, t.tile.m_block, t.tile.n_block);
      ASSERT_EQ(++seen[key], 1)
          << where << ": tile (" << t.tile.expert << ", " << t.tile.m_block << ", "
          << t.tile.n_block << ") computed twice";
    }
  }
  EXPECT_EQ(static_cast<int>(seen.size()), tiles) << "every tile computed once";
  EXPECT_EQ(phantoms, expected_phantoms) << "phantoms only past the last n-block";
}

// Raster groups of 8 m-blocks, and of 16, the kernels' since session 48 (config.h kGroupM).
constexpr int kRasterGroups[] = {8, 16};

template <int kCluster>
void expect_even_and_odd_block_counts(UnitPairs pairs = UnitPairs::kMGroupsFirst) {
  for (int group_m : kRasterGroups) {
    for (int n_blocks : {1, 2, 3, 4, 5, 7, 32}) {
      const TileShape s{.block_m = 128, .block_n = 128, .group_m = group_m, .n_blocks = n_blocks};
      SCOPED_TRACE("group_m " + std::to_string(group_m) + ", n_blocks " +
                   std::to_string(n_blocks));
      // Empty experts, one row, exact multiples, every m-block count modulo 4, 17, 20, 26 and 33
      // m-blocks (partial raster groups of either size).
      expect_units_cover_tiles<kCluster>(
          {0, 0, 1, 128, 129, 385, 385, 512 + 385, 2561, 2561 + 17 * 128, 2561 + 20 * 128,
           2561 + 26 * 128, 2561 + 33 * 128},
          s, pairs);
    }
  }
}

template <int kCluster>
void expect_random_routing_covered(UnitPairs pairs = UnitPairs::kMGroupsFirst) {
  std::uniform_int_distribution<int> rows(0, 4500), blocks(1, 40);
  for (int trial = 0; trial < 20; ++trial) {
    std::vector<int> offsets = {0};
    for (int e = 0; e < 24; ++e) offsets.push_back(offsets.back() + rows(test::rng()));
    const TileShape s{.block_m = 128, .block_n = 128, .group_m = kRasterGroups[trial % 2],
                      .n_blocks = blocks(test::rng())};
    SCOPED_TRACE("trial " + std::to_string(trial) + ", seed " + std::to_string(test::seed()));
    expect_units_cover_tiles<kCluster>(offsets, s, pairs);
  }
}

TEST(GemmClusterScheduler, PairsEvenAndOddBlockCounts) { expect_even_and_odd_block_counts<2>(); }
TEST(GemmClusterScheduler, FoursEveryBlockCountModuloFour) {
  expect_even_and_odd_block_counts<4>();
}
TEST(GemmClusterScheduler, PairsRandomRouting) { expect_random_routing_covered<2>(); }
TEST(GemmClusterScheduler, FoursRandomRouting) { expect_random_routing_covered<4>(); }
TEST(GemmClusterScheduler, NGroupsOnlyEvenAndOddBlockCounts) {
  expect_even_and_odd_block_counts<2>(UnitPairs::kNGroupsOnly);
}
TEST(GemmClusterScheduler, NGroupsOnlyRandomRouting) {
  expect_random_routing_covered<2>(UnitPairs::kNGroupsOnly);
}

TEST(GemmClusterScheduler, NGroupsOnlyFollowTheRasterOrder) {
  // 10 m-blocks, 5 n-blocks, raster groups of 8: n-group 0 (n-blocks 0, 1) of m-blocks 0-7,
  // n-group 1 of them, n-group 2 (n-block 4 and a phantom), then the same for m-blocks 8 and 9.
  const std::vector<int> offsets = {0, 10 * 128 - 7};
  const TileShape s{.block_m = 128, .block_n = 128, .group_m = 8, .n_blocks = 5};
  std::vector<int> unit_start(2);
  unit_starts(offsets.data(), 1, s, unit_start.data(), UnitPairs::kNGroupsOnly);
  ASSERT_EQ(unit_start[1], 30);
  for (int u = 0; u < 30; ++u) {
    const bool first_group = u < 24;
    const int m_block = first_group ? u % 8 : 8 + (u - 24) % 2;
    const int n_group = first_group ? u / 8 : (u - 24) / 2;
    for (int rank = 0; rank < 2; ++rank) {
      const UnitTile w =
          unit_tile(u, offsets.data(), unit_start.data(), 1, s, rank, UnitPairs::kNGroupsOnly);
      EXPECT_EQ(w.tile.m_block, m_block) << "unit " << u;
      EXPECT_EQ(w.tile.n_block, 2 * n_group + rank) << "unit " << u;
      EXPECT_EQ(w.live, 2 * n_group + rank < 5) << "unit " << u;
    }
  }
}

TEST(GemmClusterScheduler, MPairsFollowTheRasterOrder) {
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

TEST(GemmClusterScheduler, MFoursFollowTheRasterOrder) {
  // 10 m-blocks, 3 n-blocks: n-block 0's 2 fours, then n-block 1's, ...; then m-blocks 8 and 9
  // each as one n-group of 4 ranks, rank 3 a phantom (n-block 3 of 3).
  const std::vector<int> offsets = {0, 10 * 128};
  const TileShape s{.block_m = 128, .block_n = 128, .group_m = 8, .n_blocks = 3};
  std::vector<int> unit_start(2);
  unit_starts<4>(offsets.data(), 1, s, unit_start.data());
  ASSERT_EQ(unit_start[1], 8);
  for (int u = 0; u < 6; ++u) {
    const UnitTile w = unit_tile<4>(u, offsets.data(), unit_start.data(), 1, s, 1);
    EXPECT_EQ(w.tile.m_block, 4 * (u % 2) + 1) << "unit " << u;
    EXPECT_EQ(w.tile.n_block, u / 2) << "unit " << u;
    EXPECT_FALSE(w.share_a) << "unit " << u;
  }
  for (int u = 6; u < 8; ++u) {
    const UnitTile w = unit_tile<4>(u, offsets.data(), unit_start.data(), 1, s, 3);
    EXPECT_EQ(w.tile.m_block, 8 + (u - 6)) << "unit " << u;
    EXPECT_TRUE(w.share_a) << "unit " << u;
    EXPECT_FALSE(w.live) << "unit " << u << ": rank 3 of an n-group over 3 n-blocks";
  }
}

}  // namespace
}  // namespace moefuse::gemm
