// The dGLU drain's lane map (src/cuda/gemm/backward/dglu_lane_map.h) against brute force, at every
// width and warp count a kernel drains with (the BF16 dgrad: 256 × 3 warps, 192 × 7; the FP8
// kernel: 128 × 3 or 7): every (row, octet) of a 128-row tile finished by exactly one lane, no
// lane idle, and each row's lanes one aligned block of the xor-shuffle tree's width.
#include <gtest/gtest.h>

#include <vector>

#include "cuda/gemm/backward/config.h"
#include "cuda/gemm/backward/dglu_lane_map.h"

namespace moefuse::gemm::bwd {
namespace {

template <int kN, int kWarps>
void expect_map_covers_tile() {
  using Map = DGluLaneMap<kN, kWarps>;
  SCOPED_TRACE(testing::Message() << kN << " columns, " << kWarps << " warps");
  EXPECT_EQ(Map::kGroupLanes * Map::kLaneOctets, kN / 8);
  std::vector<int> times(kBlockM * Map::kOctets, 0);
  for (int warp = 0; warp < kWarps; ++warp) {
    for (int lane = 0; lane < 32; ++lane) {
      for (int r = Map::first_row(warp, lane); r < kBlockM; r += Map::kStride) {
        for (int j = 0; j < Map::kLaneOctets; ++j) {
          const int octet = Map::octet(lane, j);
          ASSERT_LT(octet, Map::kOctets) << "lane " << lane << " octet " << j;
          ++times[r * Map::kOctets + octet];
        }
      }
      // The row group: the lanes lane ^ s for s < kGroupLanes share the lane's row (the dp tree
      // never mixes rows), and exactly one of them holds octet 0 (it stores the row's dp).
      int storers = 0;
      for (int s = 0; s < Map::kGroupLanes; ++s) {
        EXPECT_EQ(Map::first_row(warp, lane ^ s), Map::first_row(warp, lane)) << lane << "^" << s;
        storers += Map::octet(lane ^ s, 0) == 0;
      }
      EXPECT_EQ(storers, 1) << "lane " << lane;
    }
  }
  for (int r = 0; r < kBlockM; ++r) {
    for (int o = 0; o < Map::kOctets; ++o) {
      EXPECT_EQ(times[r * Map::kOctets + o], 1) << "row " << r << " octet " << o;
    }
  }
}

TEST(DGluLaneMap, EveryRowOctetOnceByNoIdleLane) {
  expect_map_covers_tile<256, kEpilogueWarps>();
  expect_map_covers_tile<192, kGluEpilogueWarps>();
  expect_map_covers_tile<128, 3>();
  expect_map_covers_tile<128, 7>();
  expect_map_covers_tile<64, 5>();
}

TEST(DGluLaneMap, EightLanesARowFourRowsAWarp) {
  using Narrow = DGluLaneMap<192, kGluEpilogueWarps>;
  EXPECT_EQ(Narrow::kLaneOctets, 3);
  EXPECT_EQ(Narrow::kWarpRows, 4);
  EXPECT_EQ(Narrow::kStride, 4 * kGluEpilogueWarps);
  EXPECT_EQ((DGluLaneMap<256, kEpilogueWarps>::kLaneOctets), 4);
  EXPECT_EQ((DGluLaneMap<128, 7>::kLaneOctets), 2);
  // Lane 13: the second row of its warp, octets 5, 13, 21 of a 192-wide row.
  EXPECT_EQ(Narrow::first_row(2, 13), 9);
  EXPECT_EQ(Narrow::octet(13, 0), 5);
  EXPECT_EQ(Narrow::octet(13, 2), 21);
}

}  // namespace
}  // namespace moefuse::gemm::bwd
