// The dgrad kernel's epilogue warps (warps 1-3 of warpgroup 0, and the fourth warpgroup in the
// narrow dGLU shape): they drain every tile the consumers hand over (tile_handoff.cuh) while the
// consumers run the next tile's mainloop.
//
// Plain dgrad: D = the accumulator, bf16 (one part) or fp32 (two parts), 16-byte row pieces.
//
// dGLU (FC2 dgrad; tiles N = 256 or 192 columns wide, W = 3 or 7 epilogue warps: config.h
// DgluWideShape, DgluNarrowShape): the buffer holds g = dys·W2[e] (bf16) for output columns f of
// F, finished by dglu_drain.cuh (shared with the FP8 kernel; its comment has the work split, the
// cache policy and the precision).
#pragma once

#include <cstdint>

#include "cuda/gemm/backward/dglu_drain.cuh"
#include "cuda/gemm/backward/mainloop.cuh"
#include "cuda/gemm/backward/params.h"
#include "cuda/gemm/backward/side_permute.cuh"
#include "cuda/gemm/backward/tile_handoff.cuh"
#include "cuda/gemm/cluster_scheduler.h"
#include "cuda/gemm/common/tile_rows.cuh"

namespace moefuse::gemm::bwd {

template <EpilogueOp kOp, class S>
__device__ __forceinline__ void dglu_epilogue(const DgradProblem& p, const DGluEpilogue& ep,
                                              const StagedLayout<typename S::G>& smem,
                                              const TileShape& shape, const ClusterUnits& units) {
  TileHandoff h = TileHandoff::of(smem);
  for (int u = units.first; u < units.total; u += units.step) {
    const UnitTile w = cluster_unit_tile<S::kCluster>(u, p.offsets, smem.tile_start,
                                                      p.num_experts, shape, units.rank);
    if (!w.live) continue;
    const TileCoord& c = w.tile;
    const TileRows rows = tile_rows<kBlockM>(p, c);
    receive_tile(h, 1, [&](int, const uint8_t* tile) {
      dglu_drain<kOp, S::G::kN, S::kTilePitch, S::kEpilogueWarps>(tile, p.n, ep, rows,
                                                                 c.n_block * S::G::kN, c.n_block);
    });
  }
}

// The dGLU dgrad's epilogue warps: every live tile of this CTA, in the consumers' order.
template <class S>
__device__ __forceinline__ void dglu_epilogue_warps(const DgradProblem& p, const DGluEpilogue& ep,
                                                    const StagedLayout<typename S::G>& smem,
                                                    const TileShape& shape,
                                                    const ClusterUnits& units) {
  dispatch_epilogue_op(ep.act.op, [&](auto op) {
    dglu_epilogue<decltype(op)::value, S>(p, ep, smem, shape, units);
  });
}

// The plain dgrad's warps 1-3 of warpgroup 0: every live tile of this CTA, in the consumers'
// order. A narrow shape's bf16 tile (DgradNarrowStoreShape) goes out by bulk copies, a row each.
// With p.permute, a piece of the side permute before the first tile and after each
// (side_permute.cuh).
template <class S>
__device__ __forceinline__ void dgrad_store_epilogue_warps(const DgradProblem& p,
                                                           const StagedLayout<typename S::G>& smem,
                                                           const TileShape& shape,
                                                           const ClusterUnits& units) {
  constexpr int kN = S::G::kN;
  TileHandoff h = TileHandoff::of(smem);
  const int worker = EpilogueLane::of_thread().worker(), workers = S::kEpilogueWarps * 32;
  const bool permutes = p.permute.xs != nullptr;
  const int tiles = units.total > units.first ? ceil_div(units.total - units.first, units.step) : 0;
  SidePermuteShare side(p.permute, tiles + 1);
  if (permutes) side.take_piece(worker, workers);
  for (int u = units.first; u < units.total; u += units.step) {
    const UnitTile w = cluster_unit_tile<S::kCluster>(u, p.offsets, smem.tile_start,
                                                      p.num_experts, shape, units.rank);
    if (!w.live) continue;
    const TileCoord& c = w.tile;
    const TileRows rows = tile_rows<kBlockM>(p, c);
    const int n0 = c.n_block * kN;
    if constexpr (kN != kBlockN) {
      receive_tile(h, 1, [&](int, const uint8_t* tile) {
        auto* d = static_cast<uint8_t*>(p.d) + (int64_t{rows.first} * p.n + n0) * 2;
        copy_rows_bulk(tile, S::kTilePitch, d, int64_t{p.n} * 2,
                       min(kBlockM, rows.end - rows.first), min(kN, p.n - n0) * 2);
      });
    } else {
      const int parts = handoff_parts(p.d_fp32);
      receive_tile(h, parts, [&](int part, const uint8_t* tile) {
        drain_output<false>(tile, part, parts, p.d, p.d_fp32, p.n, p.n, rows.first, rows.end, n0);
      });
    }
    if (permutes) side.take_piece(worker, workers);
  }
  if (permutes) side.finish(worker, workers);
}

}  // namespace moefuse::gemm::bwd
