// The row kernels' reading of the dispatch maps (src/cuda/dispatch/row_index.h) on the CPU:
// which row_of entries are used, skipped or reported, and what the zeroing warps do with each
// row of their 32-row slices, including the lanes past R and T = 0 (no token index is valid).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "common/test_util.h"
#include "cuda/dispatch/row_index.h"

namespace moefuse {
namespace {

using cuda::classify_fill;
using cuda::classify_row;
using cuda::RowFill;
using cuda::RowUse;

TEST(DispatchRowIndex, RowOfEntries) {
  const int R = 5;
  EXPECT_EQ(classify_row(0, R), RowUse::kUse);
  EXPECT_EQ(classify_row(R - 1, R), RowUse::kUse);
  EXPECT_EQ(classify_row(-1, R), RowUse::kSkip);
  EXPECT_EQ(classify_row(R, R), RowUse::kBad);
  EXPECT_EQ(classify_row(-2, R), RowUse::kBad);
  EXPECT_EQ(classify_row(INT32_MIN, R), RowUse::kBad);
  EXPECT_EQ(classify_row(0, 0), RowUse::kBad);  // R = 0: no row exists
  EXPECT_EQ(classify_row(-1, 0), RowUse::kSkip);
}

// Every row of a zeroing grid (rows rounded up to whole 32-row warps, as the kernels launch it)
// against the rule written out: past R nothing, -1 zeroed, [0, T) kept, the rest reported.
void check_grid(const std::vector<int32_t>& token_of_row, int tokens) {
  const int R = static_cast<int>(token_of_row.size());
  const int grid_rows = (R + 31) / 32 * 32 + 32;  // one whole warp more than needed
  SCOPED_TRACE("R=" + std::to_string(R) + " T=" + std::to_string(tokens));
  for (int r = 0; r < grid_rows; ++r) {
    RowFill want = RowFill::kPastEnd;
    if (r < R) {
      const int32_t tok = token_of_row[r];
      want = tok == -1                      ? RowFill::kZero
             : tok >= 0 && tok < tokens     ? RowFill::kToken
                                            : RowFill::kBad;
    }
    ASSERT_EQ(classify_fill(token_of_row.data(), r, R, tokens), want) << "row " << r;
  }
}

TEST(DispatchRowIndex, NoTokensMeansOnlyZeroedRowsAndNothingReported) {
  // T = 0: every row is padding (token_of_row = -1), and the lanes past R must not report.
  for (int R : {0, 1, 3, 32, 33}) {
    const std::vector<int32_t> tor(R, -1);
    check_grid(tor, 0);
    for (int r = 0; r < (R + 31) / 32 * 32 + 32; ++r)
      EXPECT_NE(classify_fill(tor.data(), r, R, 0), RowFill::kBad) << "R=" << R << " row " << r;
  }
}

TEST(DispatchRowIndex, TokenOfRowEntries) {
  const int T = 7;
  std::vector<int32_t> tor = {-1, 0, T - 1, T, -2, 3, -1};
  check_grid(tor, T);
  EXPECT_EQ(classify_fill(tor.data(), 3, 7, T), RowFill::kBad);
  EXPECT_EQ(classify_fill(tor.data(), 4, 7, T), RowFill::kBad);
  // Random maps: tokens, padding and a few bad entries, R not a multiple of 32.
  for (int R : {1, 31, 45, 100}) {
    std::vector<int32_t> m(R);
    std::uniform_int_distribution<int32_t> pick(-3, T + 2);
    for (auto& x : m) x = pick(test::rng());
    check_grid(m, T);
  }
}

}  // namespace
}  // namespace moefuse
