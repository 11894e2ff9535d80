// The FP8 forward tile's geometry (src/cuda/gemm/fp8/config.h, Fp8Tile): where a tile's columns
// move from one 128-column weight-scale block to the next, against the block of every column.
#include <gtest/gtest.h>

#include "cuda/gemm/fp8/config.h"

namespace moefuse::gemm::fp8 {
namespace {

// Every column of every tile of an N-wide output: the promotion scales column group j (8
// columns) by the tile's first weight block below second_weight_group and by the next from it,
// so each column's block must be the first block's index plus (j >= that group).
template <int kN>
void expect_weight_groups_match_columns(int n) {
  for (int n0 = 0; n0 < n; n0 += kN) {
    const int second = second_weight_group<kN>(n0);
    ASSERT_GE(second, 1) << "n0 " << n0;
    ASSERT_LE(second, kN / 8) << "n0 " << n0;
    const int first_block = n0 / kWeightBlock;
    for (int c = 0; c < kN; ++c) {
      const int block = (n0 + c) / kWeightBlock;
      EXPECT_EQ(block, first_block + (c / 8 >= second ? 1 : 0)) << "n0 " << n0 << " column " << c;
      EXPECT_LE(block, first_block + 1) << "a tile spans at most two weight blocks";
    }
  }
}

TEST(Fp8Tile, WeightScaleBlocksOfEveryColumn) {
  expect_weight_groups_match_columns<kBlockN>(4096);
  expect_weight_groups_match_columns<kBf16OutBlockN>(4096);
  expect_weight_groups_match_columns<kBf16OutBlockN>(2880);
  expect_weight_groups_match_columns<kBf16OutBlockN>(7168);
}

TEST(Fp8Tile, GeometryOfBothWidths) {
  // The 128-wide one, every other instantiation's: 64 + 64 accumulators, B in A's halves, five
  // stages, a 272-byte tile pitch.
  EXPECT_EQ(Tile128::kAccumulators, 64);
  EXPECT_EQ(Tile128::kStages, 5);
  EXPECT_EQ(Tile128::kBHalfRows, kHalfRows);
  EXPECT_EQ(Tile128::kTilePitch, 272);
  // The 192-wide one: 96 + 96 accumulators, B in halves of 96 rows, four stages, and its shared
  // memory (with the 256 static bytes of tile slots) within Hopper's 227 KiB at 1024 experts.
  using Wide = Fp8Tile<kBf16OutBlockN>;
  EXPECT_EQ(Wide::kAccumulators, 96);
  EXPECT_EQ(Wide::kBHalfRows, 96);
  EXPECT_EQ(Wide::kStages, 4);
  EXPECT_LE(Wide::smem_bytes(1024) + 256, 227 * 1024);
  EXPECT_GT(fp8_gemm_smem_bytes(Wide::kStages + 1, Wide::kStageBytes, Wide::kTileBytes, 1024) +
                256,
            227 * 1024);
  EXPECT_EQ(Wide::kTilePitch % 32, 16) << "an odd multiple of 16 bytes";
}

}  // namespace
}  // namespace moefuse::gemm::fp8
