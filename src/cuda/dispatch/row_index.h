// How the row kernels (permute, combine and their backward) read the dispatch maps: pure
// __host__ __device__ rules, unit-tested on the CPU (tests/cpu/dispatch_row_index_test.cpp).
#pragma once

#include <cstdint>

#include "formats/host_device.h"

namespace moefuse::cuda {

// A row_of[t, j] entry: a row in [0, R) is used; -1 (a dropped assignment) is skipped; anything
// else is skipped and reported (kHealthRowOutOfRange).
enum class RowUse { kUse, kSkip, kBad };

MOEFUSE_HD RowUse classify_row(int32_t row, int rows) {
  if (row >= 0 && row < rows) return RowUse::kUse;
  return row == -1 ? RowUse::kSkip : RowUse::kBad;
}

// Row r as the zeroing warps see it. They run on a grid rounded up to 32 rows per warp, so r
// may lie past R: then token_of_row is not read and nothing is reported, whatever T is (a
// placeholder token index there would be out of range when T = 0). Inside R: -1 (a padding row
// or a row past offsets[E]) is zeroed, a token in [0, T) is left to the token's warp, anything
// else is reported (kHealthRowOutOfRange).
enum class RowFill { kPastEnd, kZero, kToken, kBad };

MOEFUSE_HD RowFill classify_fill(const int32_t* token_of_row, int r, int rows, int tokens) {
  if (r >= rows) return RowFill::kPastEnd;
  const int32_t tok = token_of_row[r];
  if (tok == -1) return RowFill::kZero;
  return tok >= 0 && tok < tokens ? RowFill::kToken : RowFill::kBad;
}

}  // namespace moefuse::cuda
