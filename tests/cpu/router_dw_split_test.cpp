// plan_dw_split (src/cuda/router/router_dw_split.h): the split of the router's dWr GEMM along T.
// Brute force over shapes: the parts cover T exactly in aligned chunks, fit the partials' room,
// keep each chunk long, and leave small or already-wide problems unsplit.
#include <gtest/gtest.h>

#include <string>

#include "cuda/router/router_dw_split.h"

namespace moefuse::cuda {
namespace {

TEST(RouterDwSplit, PartsCoverTokensAndFit) {
  for (int64_t T : {1, 7, 1023, 2048, 4133, 16384, 65539}) {
    for (int64_t H : {64, 2048, 2880, 7168}) {
      for (int64_t E : {7, 128, 256, 512}) {
        for (size_t room : {size_t{0}, size_t{1} << 20, size_t{24} << 20}) {
          SCOPED_TRACE("T=" + std::to_string(T) + " H=" + std::to_string(H) + " E=" +
                       std::to_string(E) + " room=" + std::to_string(room));
          const DwSplit s = plan_dw_split(T, H, E, 132, room);
          ASSERT_GE(s.parts, 1);
          if (s.parts == 1) {
            EXPECT_EQ(s.chunk, T);
            continue;
          }
          EXPECT_EQ(s.chunk % kDwChunkAlign, 0);
          EXPECT_GE(s.chunk, kDwMinChunk);
          EXPECT_LT((s.parts - 1) * s.chunk, T);  // the last part is not empty
          EXPECT_GE(s.parts * s.chunk, T);        // and the parts cover T
          EXPECT_LE(static_cast<size_t>(s.parts * E * H) * sizeof(float), room);
        }
      }
    }
  }
}

TEST(RouterDwSplit, PresetShapes) {
  const size_t room = size_t{24} << 20;
  // qwen3-30b-a3b: 16 output tiles, so 8 parts bring 128 GEMM tiles to 132 SMs (9 would leave
  // 12 SMs two tiles each).
  const DwSplit qwen3 = plan_dw_split(16384, 2048, 128, 132, room);
  EXPECT_EQ(qwen3.parts, 8);
  EXPECT_EQ(qwen3.chunk, 2048);
  // gpt-oss-120b: 23 tiles, 5 parts (115 tiles); deepseek-v3's slice: 56 tiles, 2 parts.
  EXPECT_EQ(plan_dw_split(16384, 2880, 128, 132, room).parts, 5);
  EXPECT_EQ(plan_dw_split(16384, 7168, 32, 132, room).parts, 2);
  // 112 tiles already: no second wave for a second part.
  EXPECT_EQ(plan_dw_split(16384, 7168, 256, 132, room).parts, 1);
  // Too few tokens for two long chunks: no split.
  EXPECT_EQ(plan_dw_split(2047, 2048, 128, 132, room).parts, 1);
  // A wide problem (more tiles than SMs): no split.
  EXPECT_EQ(plan_dw_split(16384, 16384, 512, 132, room).parts, 1);
}

TEST(RouterDwSplit, SplitIntoCoversTokens) {
  for (int64_t T : {1, 8, 1000, 16384, 16389}) {
    for (int64_t splits : {1, 2, 7, 9}) {
      const DwSplit s = dw_split_into(T, splits);
      EXPECT_LE(s.parts, splits);
      EXPECT_GE(s.parts * s.chunk, T);
      EXPECT_LT((s.parts - 1) * s.chunk, T);
      if (s.parts > 1) EXPECT_EQ(s.chunk % kDwChunkAlign, 0);
    }
  }
}

}  // namespace
}  // namespace moefuse::cuda
