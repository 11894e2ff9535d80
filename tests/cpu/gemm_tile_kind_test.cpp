// How the bf16 kernels' two consumer warpgroups split a tile (cuda/gemm/common/tile_kind.h): the
// kind chosen for each data extent, and that the two slabs of every kind cover all of the tile's
// data exactly once with no more MMA work than a full tile.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "cuda/gemm/common/tile_kind.h"

namespace moefuse::gemm {
namespace {

constexpr int kBlockM = 128, kBlockN = 256, kSlabRows = 64;

TEST(GemmTileKind, HalvesOnlyWhereAHalfHoldsAllTheData) {
  EXPECT_EQ(tile_kind(128, 256, kBlockM, kBlockN), TileKind::kFull);
  EXPECT_EQ(tile_kind(65, 129, kBlockM, kBlockN), TileKind::kFull);
  EXPECT_EQ(tile_kind(64, 256, kBlockM, kBlockN), TileKind::kRowHalf);
  EXPECT_EQ(tile_kind(1, 256, kBlockM, kBlockN), TileKind::kRowHalf);
  EXPECT_EQ(tile_kind(128, 128, kBlockM, kBlockN), TileKind::kColHalf);
  EXPECT_EQ(tile_kind(65, 64, kBlockM, kBlockN), TileKind::kColHalf);  // gpt-oss's N = 2880 tail
  EXPECT_EQ(tile_kind(10, 8, kBlockM, kBlockN), TileKind::kRowHalf);   // both few: rows win
}

TEST(GemmTileKind, SlabsCoverTheDataOnceAndHalvesCostHalf) {
  for (int rows : {1, 2, 63, 64, 65, 100, 127, 128}) {
    for (int cols : {8, 64, 127, 128, 129, 200, 255, 256}) {
      const TileKind kind = tile_kind(rows, cols, kBlockM, kBlockN);
      SCOPED_TRACE("rows " + std::to_string(rows) + " cols " + std::to_string(cols));
      std::vector<int> covered(kBlockM * kBlockN, 0);
      int mma_cells = 0;
      for (int slab = 0; slab < 2; ++slab) {
        const SlabGeometry g = slab_geometry(kind, slab, kBlockM, kBlockN);
        ASSERT_GE(g.first_row, 0);
        ASSERT_LE(g.first_row + kSlabRows, kBlockM);
        ASSERT_GE(g.first_col, 0);
        ASSERT_LE(g.first_col + g.cols, kBlockN);
        mma_cells += kSlabRows * g.cols;
        for (int r = g.first_row; r < g.first_row + kSlabRows; ++r)
          for (int c = g.first_col; c < g.first_col + g.cols; ++c) ++covered[r * kBlockN + c];
      }
      for (int r = 0; r < kBlockM; ++r)
        for (int c = 0; c < kBlockN; ++c) {
          const int times = covered[r * kBlockN + c];
          ASSERT_LE(times, 1) << "row " << r << " col " << c << " computed twice";
          if (r < rows && c < cols) ASSERT_EQ(times, 1) << "row " << r << " col " << c;
        }
      EXPECT_EQ(mma_cells, kind == TileKind::kFull ? kBlockM * kBlockN : kBlockM * kBlockN / 2);
    }
  }
}

}  // namespace
}  // namespace moefuse::gemm
