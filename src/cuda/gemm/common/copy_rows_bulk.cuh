// The epilogue warps' drain of a staged tile by the TMA engine, shared by the backward's plain
// output (backward/tile_handoff.cuh drain_output) and the forward's linear output
// (epilogues/staged_tile.cuh): one cp.async.bulk shared → global a row, issued by the 96
// epilogue threads (warps 1-3 of warpgroup 0) in turn, so their issue slots no longer bound the
// stores; or (kAddF32, the wgrad's accumulate) one cp.reduce.async.bulk .add.f32 a row, the add
// done in L2, so no old value travels to the SM. The consumers that staged the rows fence them
// for the async proxy before they publish the tile (cute::tma_store_fence).
#pragma once

#include <cute/arch/copy_sm90_tma.hpp>

#include <cstdint>

#include "cuda/gemm/common/warp_roles.h"

namespace moefuse::gemm {

// dst[0, bytes) += src[0, bytes) as fp32 (each element one add, rounded to nearest), by the TMA
// engine in L2: the bulk twin of SM90_BULK_COPY_S2G.
__device__ __forceinline__ void bulk_reduce_add_f32(const void* src, void* dst, int bytes) {
  asm volatile("cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32 [%0], [%1], %2;\n"
               ::"l"(dst), "r"(cute::cast_smem_ptr_to_uint(src)), "r"(bytes)
               : "memory");
}

// Buffer rows [0, rows) (tile_pitch bytes apart) → dst rows 0, 1, ... (row_pitch_bytes apart),
// `bytes` of each (a multiple of 16, both ends 16-byte aligned), copied or (kAddF32) added as
// fp32. Each thread then waits until its copies have read the buffer, so the release that
// follows hands it back whole; the global writes complete on their own (before the grid does).
template <bool kAddF32 = false>
__device__ __forceinline__ void copy_rows_bulk(const uint8_t* tile, int tile_pitch, uint8_t* dst,
                                               int64_t row_pitch_bytes, int rows, int bytes) {
  if (bytes <= 0) return;
  for (int r = static_cast<int>(threadIdx.x) - 32; r < rows; r += kEpilogueThreads) {
    if constexpr (kAddF32)
      bulk_reduce_add_f32(tile + r * tile_pitch, dst + r * row_pitch_bytes, bytes);
    else
      cute::SM90_BULK_COPY_S2G::copy(tile + r * tile_pitch, dst + r * row_pitch_bytes, bytes);
  }
  cute::tma_store_arrive();
  cute::tma_store_wait<0>();
}

}  // namespace moefuse::gemm
