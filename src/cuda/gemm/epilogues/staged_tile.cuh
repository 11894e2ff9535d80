// The forward kernels' overlapped epilogue (BF16 and FP8): the consumers hand each finished tile
// to the epilogue warps through shared memory and go straight back to the mainloop, so bias,
// activation, row scale and every global store of tile i run while the tensor cores work on
// tile i + 1. Hand-off: one tile buffer, two mbarriers (common/tile_handoff.cuh has the
// protocol); the buffer holds 128 rows × N columns (256, or 192 where narrow_width) at a row
// pitch of 2N + 16 bytes, so a warp's 8 rows of 16-byte pieces hit all 32 banks (config.h
// TileConfig). Both sides of one tile: the consumers (256 threads) stage it (stage_tile), the
// epilogue warps (96 threads) drain it (drain_tile), masked by rows (< the expert's end) and
// columns (< N). Two ways through:
// - the linear output without a saved pre-activation (FC2, every unfused GEMM): the consumers
//   stage the final values, (h + bias) · the row scale rounded once, and the epilogue warps copy
//   the expert's rows out with one bulk copy each (common/copy_rows_bulk.cuh);
// - everything else: the consumers stage bf16(h + bias) and the epilogue warps apply the
//   activation and the row scale on the way out (drain_staged_tile.cuh).
// The first exists because the register path's row-scale load per 16-byte piece put qwen3's
// fused FC2 9% behind the plain GEMM (ncu, run 18). The activation reads the bf16-rounded h,
// exactly the pre-activation saved for backward (so the forward and the backward's recomputation
// agree) and what an unfused bf16 path computes.
#pragma once

#include <cute/arch/copy_sm90_tma.hpp>

#include <cstdint>

#include "cuda/gemm/common/copy_rows_bulk.cuh"
#include "cuda/gemm/common/stage_accumulators.cuh"
#include "cuda/gemm/common/tile_handoff.cuh"
#include "cuda/gemm/epilogues/drain_staged_tile.cuh"
#include "cuda/gemm/params.h"

namespace moefuse::gemm {

__device__ __forceinline__ bool copies_staged_tile(const EpilogueParams& ep) {
  return ep.op == EpilogueOp::kLinear && !ep.pre;
}

// Consumer warpgroup `slab`, before the tile's K loop: the scales stage_tile applies to its rows
// (rows [row_first, row_end) of the expert) and the expert's bias columns [n0, n0 + kCols) into
// L1, so that neither load's latency falls between the K loop and the next tile's.
template <int kRows, int kCols>
__device__ __forceinline__ RowScales prefetch_tile_operands(const EpilogueParams& ep, int slab,
                                                            int expert, int n, int n0,
                                                            int row_first, int row_end) {
  if (ep.bias) prefetch_bias_l1<kCols>(ep.bias + static_cast<int64_t>(expert) * n, n0, n);
  return load_row_scales<kRows>(
      copies_staged_tile(ep) && ep.row_scale ? ep.row_scale + row_first : nullptr, slab,
      row_end - row_first);
}

// Consumer warpgroup `slab`: its 64 rows of the tile of expert `expert` at column n0 into the
// hand-off buffer, scaled by `scales` (prefetch_tile_operands).
template <int kRows, int kCols, int kPitch>
__device__ __forceinline__ void stage_tile(const float (&acc)[kCols / 2], TileHandoff& handoff,
                                           int slab, const EpilogueParams& ep, int expert, int n,
                                           int n0, const RowScales& scales) {
  handoff.acquire();
  stage_accumulators<kRows, kCols, kPitch>(
      acc, handoff.tile, slab, ep.bias ? ep.bias + static_cast<int64_t>(expert) * n : nullptr,
      n0, n, scales);
  // The bulk copies read the buffer by the async proxy.
  if (copies_staged_tile(ep)) cute::tma_store_fence();
  handoff.publish();
}

// The epilogue warps (threads 32-127): the staged tile out to D. Problem: GemmProblem or
// fp8::Fp8GemmProblem (n, n_out, d).
template <int kRows, int kCols, int kPitch, class Problem>
__device__ __forceinline__ void drain_tile(const uint8_t* tile, const Problem& p,
                                           const EpilogueParams& ep, int row_first, int row_end,
                                           int n0) {
  if (copies_staged_tile(ep)) {
    auto* d = static_cast<uint8_t*>(p.d) + (int64_t{row_first} * p.n_out + n0) * 2;
    copy_rows_bulk(tile, kPitch, d, int64_t{p.n_out} * 2, min(kRows, row_end - row_first),
                   min(kCols, p.n - n0) * 2);
    return;
  }
  dispatch_epilogue_op(ep.op, [&](auto op) {
    drain_staged_tile<decltype(op)::value, kRows, kCols, kPitch>(
        tile, p, ep, row_first, row_end, n0, static_cast<int>(threadIdx.x) - 32,
        kEpilogueThreads);
  });
}

}  // namespace moefuse::gemm
