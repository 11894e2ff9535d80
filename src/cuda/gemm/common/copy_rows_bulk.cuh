// The epilogue warps' drain of a staged tile by the TMA engine, shared by the backward's plain
// output (backward/tile_handoff.cuh drain_output) and the forward's linear output
// (epilogues/staged_tile.cuh): one cp.async.bulk shared → global a row, issued by the 96
// epilogue threads (warps 1-3 of warpgroup 0) in turn, so their issue slots no longer bound the
// stores. The consumers that staged the rows fence them for the async proxy before they publish
// the tile (cute::tma_store_fence).
#pragma once

#include <cute/arch/copy_sm90_tma.hpp>

#include <cstdint>

#include "cuda/gemm/common/warp_roles.h"

namespace moefuse::gemm {

// Buffer rows [0, rows) (tile_pitch bytes apart) → dst rows 0, 1, ... (row_pitch_bytes apart),
// `bytes` of each (a multiple of 16, both ends 16-byte aligned). Each thread then waits until its
// copies have read the buffer, so the release that follows hands it back whole; the global
// writes complete on their own (before the grid does).
__device__ __forceinline__ void copy_rows_bulk(const uint8_t* tile, int tile_pitch, uint8_t* dst,
                                               int64_t row_pitch_bytes, int rows, int bytes) {
  if (bytes <= 0) return;
  for (int r = static_cast<int>(threadIdx.x) - 32; r < rows; r += kEpilogueThreads)
    cute::SM90_BULK_COPY_S2G::copy(tile + r * tile_pitch, dst + r * row_pitch_bytes, bytes);
  cute::tma_store_arrive();
  cute::tma_store_wait<0>();
}

}  // namespace moefuse::gemm
