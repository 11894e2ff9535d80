// Device helpers of the row-moving kernels (permute, combine and their backward): rows are
// H bf16 = H/8 16-byte vectors; one warp works on one token and walks its rows in chunks of
// 32 lanes × a few vectors so that several 16-byte loads per lane are in flight.
#pragma once

#include <cstdint>

#include "cuda/dispatch/row_index.h"
#include "cuda/packed_values.cuh"  // unpack_bf16x8, pack_bf16x8: the row kernels' octets
#include "moefuse/health.h"

namespace moefuse::cuda {

inline constexpr int kRowWarps = 8;  // warps (tokens) per block of the row kernels

// A row_of entry as the row kernels use it (classify_row): the row, or -1 when there is none
// to use; a bad entry is reported.
__device__ __forceinline__ int usable_row(int32_t r, int rows, int32_t* health) {
  const RowUse use = classify_row(r, rows);
  if (use == RowUse::kBad && health) atomicOr(health, kHealthRowOutOfRange);
  return use == RowUse::kUse ? r : -1;
}

// Lane j (< k) loads row_of[t, j]: usable_row of it, or -1 for the other lanes.
__device__ __forceinline__ int load_row(const int32_t* row_of, int64_t t, int k, int lane,
                                        int rows, int32_t* health) {
  return lane < k ? usable_row(row_of[t * k + lane], rows, health) : -1;
}

// The warp zeroes those of rows [first, first + 32) whose token_of_row is -1 (padding rows and
// rows past offsets[E]), so every row of the output is written exactly once per call.
__device__ __forceinline__ void zero_unassigned_rows(const int32_t* token_of_row, uint4* out,
                                                     int rows, int vecs, int tokens, int first,
                                                     int lane, int32_t* health) {
  const RowFill fill = classify_fill(token_of_row, first + lane, rows, tokens);
  if (fill == RowFill::kBad && health) atomicOr(health, kHealthRowOutOfRange);
  unsigned pending = __ballot_sync(0xffffffffu, fill == RowFill::kZero);
  while (pending) {
    const int row = first + __ffs(pending) - 1;
    pending &= pending - 1;
    uint4* dst = out + static_cast<int64_t>(row) * vecs;
    for (int c = lane; c < vecs; c += 32) dst[c] = make_uint4(0, 0, 0, 0);
  }
}

// Blocks of the zeroing part: one warp per 32 rows.
inline unsigned zero_blocks(int64_t rows) {
  return static_cast<unsigned>((rows + 32 * kRowWarps - 1) / (32 * kRowWarps));
}

}  // namespace moefuse::cuda
