// The permute's launch shape (src/cuda/dispatch/permute_tuning.h): rows of x a stage holds under
// the copy's tuning and the default one, and the copy's minimums (two rows, four of split
// 256-byte units) giving way where their stages would not fit shared memory.
#include <gtest/gtest.h>

#include "cuda/dispatch/permute_tuning.h"

namespace moefuse::cuda {
namespace {

TEST(PermuteTuning, CopyStagesHoldAtLeastTwoRows) {
  EXPECT_EQ(permute_stage_rows(2880, kPermuteCopyTuning), 4);  // gpt-oss: split 256-byte units
  EXPECT_EQ(permute_stage_rows(2816, kPermuteCopyTuning), 2);  // 5632-byte rows: whole units
  EXPECT_EQ(permute_stage_rows(7168, kPermuteCopyTuning), 2);  // deepseek: 14 KiB rows
  EXPECT_EQ(permute_stage_rows(2048, kPermuteCopyTuning), 2);  // qwen3: 8 KiB of 4 KiB rows
  EXPECT_EQ(permute_stage_rows(512, kPermuteCopyTuning), 8);   // 8 KiB is 8 rows
  EXPECT_EQ(permute_stage_rows(64, kPermuteCopyTuning), 8);    // at most 8 rows
  EXPECT_EQ(permute_stage_rows(2880, PermuteTuning{}), 1);     // the quantising permutes' default
}

TEST(PermuteTuning, TwoRowsGiveWayWhereTheyDoNotFit) {
  // Two stages of two rows of H bf16 take 8·H bytes beside the 226 KiB the kernel may use.
  EXPECT_EQ(permute_stage_rows(28928, kPermuteCopyTuning), 2);  // 231424 bytes: fits exactly
  EXPECT_EQ(permute_stage_rows(28936, kPermuteCopyTuning), 1);
  EXPECT_EQ(permute_stage_rows(57000, kPermuteCopyTuning), 1);
  // Four rows of split units likewise: 14400 · 2 · 4 · 2 = 230400 bytes fit, 14480's do not.
  EXPECT_EQ(permute_stage_rows(14400, kPermuteCopyTuning), 4);
  EXPECT_EQ(permute_stage_rows(14480, kPermuteCopyTuning), 3);
  EXPECT_EQ(permute_stage_rows(28920, kPermuteCopyTuning), 2);
}

}  // namespace
}  // namespace moefuse::cuda
