// The rows of an M-ragged tile (forward, FP8 and dgrad): the first row of A (and D) it covers and
// the end of its expert's rows (exclusive, capped at m_cap so that bad offsets can never make
// the epilogue write out of bounds). Problem: any struct with offsets and m_cap.
#pragma once

#include "cuda/gemm/tile_scheduler.h"

namespace moefuse::gemm {

struct TileRows {
  int first;
  int end;
};

template <int kBlockM, class Problem>
__device__ __forceinline__ TileRows tile_rows(const Problem& p, const TileCoord& c) {
  const int first = __ldg(p.offsets + c.expert) + c.m_block * kBlockM;
  return TileRows{.first = first, .end = min(__ldg(p.offsets + c.expert + 1), p.m_cap)};
}

}  // namespace moefuse::gemm
