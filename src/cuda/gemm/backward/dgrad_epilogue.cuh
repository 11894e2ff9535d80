// The dgrad kernel's epilogue warps (warps 1-3 of warpgroup 0, and the fourth warpgroup in the
// narrow dGLU shape): they drain every tile the consumers hand over (tile_handoff.cuh) while the
// consumers run the next tile's mainloop.
//
// Plain dgrad: D = the accumulator, bf16 (one part) or fp32 (two parts), 16-byte row pieces.
//
// dGLU (FC2 dgrad; tiles N = 256 or 192 columns wide, W = 3 or 7 epilogue warps: config.h
// DgluWideShape, DgluNarrowShape): the buffer holds g = dys·W2[e] (bf16) for output columns f of
// F. Epilogue warp w finishes tile rows w, w + W, ... six at a time (the six rows' pre loads in
// flight together: run 9's profile found these warps latency-bound on them with four; g is read
// from the buffer only when used, so the registers go to loads in flight); lane l < N / 8
// finishes columns f0 = n0 + 8l .. f0 + 7 of the row: 16-byte loads of g from the buffer and of
// the saved pre (GLU: gate f0.. at interleaved column 2·f0, up 8 columns later — the interleave
// of 8; squared ReLU: column f0), the activation and its derivatives, 16-byte stores of
// d_pre = act'(pre) ⊙ (p·g) (interleaved like pre) and scaled_act = p·act. A warp thus reads
// and writes whole row segments: 4N bytes of pre and d_pre, 2N of scaled_act (GLU).
//   dp: each lane sums g·act over its 8 columns in order, a xor-shuffle tree adds the 32 lanes,
//   lane 0 stores the (row, n-block) partial: deterministic.
//   Cache policy: pre, d_pre and scaled_act are touched once, so they are loaded and stored
//   `.cs` (evict-first) and not prefetched. Prefetching the next tile's pre rows into L2 (until
//   session 14) was evicted before its drain began: ncu counted 2.49 GB read by this kernel on
//   qwen3, where dys, W2 and pre hold 1.34 GB; without it 1.73 GB and 7% less time.
// Rows at or past the expert's end and octets at or past n are neither read nor written (n % 8
// == 0: an octet is entirely in or out).
//
// Precision: g reaches the epilogue rounded to bf16 (a full fp32 tile, 128 KiB, does not fit next
// to the pipeline stages). That is the unfused twin's (and torch's) g; d_pre and dp carry one more
// bf16 rounding than an fp32 g would give (tests/gpu/grouped_gemm_backward_ops_test.cu).
//
// Code size: the activation is a template parameter, chosen once per kernel (one switch around
// the tile loop); the per-row body is one octet per lane.
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

#include "cuda/gemm/backward/activation_backward.h"
#include "cuda/gemm/backward/mainloop.cuh"
#include "cuda/gemm/backward/params.h"
#include "cuda/gemm/backward/tile_handoff.cuh"
#include "cuda/gemm/common/tile_rows.cuh"
#include "cuda/gemm/cluster_scheduler.h"
#include "cuda/packed_values.cuh"

namespace moefuse::gemm::bwd {

// One octet: g and pre as loaded (bf16), f0 = its first column; returns Σ g·act.
template <EpilogueOp kOp>
__device__ __forceinline__ float finish_octet(const EpilogueParams& act_params, float scale,
                                              const uint4& g_raw, const uint4& gate_raw,
                                              const uint4& up_raw, __nv_bfloat16* d_pre,
                                              __nv_bfloat16* scaled_act) {
  constexpr bool kGlu = is_glu_op(kOp);
  float g[8], gate[8], up[8], d_gate[8], d_up[8], act[8];
  cuda::unpack_bf16x8(g_raw, g);
  cuda::unpack_bf16x8(gate_raw, gate);
  if constexpr (kGlu) cuda::unpack_bf16x8(up_raw, up);
  float dp = 0.0f;
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    const ActivationGrad a = activation_grad_op<kOp>(act_params, gate[i], kGlu ? up[i] : 0.0f);
    dp = fmaf(g[i], a.value, dp);
    const float d_act = scale * g[i];
    d_gate[i] = d_act * a.d_gate;
    d_up[i] = d_act * a.d_up;
    act[i] = scale * a.value;
  }
  __stcs(reinterpret_cast<uint4*>(d_pre), cuda::pack_bf16x8(d_gate));
  if constexpr (kGlu) __stcs(reinterpret_cast<uint4*>(d_pre + 8), cuda::pack_bf16x8(d_up));
  if (scaled_act) __stcs(reinterpret_cast<uint4*>(scaled_act), cuda::pack_bf16x8(act));
  return dp;
}

// The dGLU of one handed-over tile (rows from row_first, < row_end; columns from n0): lanes
// 0 .. N / 8 - 1 take the tile's octets.
template <EpilogueOp kOp, class S>
__device__ __forceinline__ void dglu_drain(const uint8_t* tile, const DgradProblem& p,
                                           const DGluEpilogue& ep, const TileRows& rows_of_tile,
                                           int n0, int n_block) {
  constexpr bool kGlu = is_glu_op(kOp);
  constexpr int kRows = 6;  // rows per warp whose pre loads are in flight together
  constexpr int kWarps = S::kEpilogueWarps;
  const int pre_cols = kGlu ? 2 * p.n : p.n;
  const EpilogueLane me = EpilogueLane::of_thread();
  const int f0 = n0 + 8 * me.lane;
  const bool col_ok = me.lane < S::G::kN / 8 && f0 < p.n;
  const int gate_col = kGlu ? 2 * f0 : f0;
  const int rows = min(kBlockM, rows_of_tile.end - rows_of_tile.first);
  for (int r0 = me.warp; r0 < rows; r0 += kWarps * kRows) {
    uint4 gate_raw[kRows], up_raw[kRows];
#pragma unroll
    for (int i = 0; i < kRows; ++i) {
      const int r = r0 + kWarps * i;
      if (r < rows && col_ok) {
        const __nv_bfloat16* pre =
            ep.pre + static_cast<int64_t>(rows_of_tile.first + r) * pre_cols + gate_col;
        gate_raw[i] = __ldcs(reinterpret_cast<const uint4*>(pre));
        up_raw[i] = kGlu ? __ldcs(reinterpret_cast<const uint4*>(pre + 8)) : uint4{};
      }
    }
#pragma unroll
    for (int i = 0; i < kRows; ++i) {
      const int r = r0 + kWarps * i;
      if (r >= rows) break;  // warp-uniform: the shuffles below see all 32 lanes
      const int64_t row = rows_of_tile.first + r;
      float dp = 0.0f;
      if (col_ok) {
        const float scale = ep.row_scale ? __ldg(ep.row_scale + row) : 1.0f;
        const uint4 g_raw =
            *reinterpret_cast<const uint4*>(tile + r * S::kTilePitch + 16 * me.lane);
        dp = finish_octet<kOp>(ep.act, scale, g_raw, gate_raw[i], up_raw[i],
                               ep.d_pre + row * pre_cols + gate_col,
                               ep.scaled_act ? ep.scaled_act + row * p.n + f0 : nullptr);
      }
#pragma unroll
      for (int s = 16; s > 0; s /= 2) dp += __shfl_xor_sync(0xffffffffu, dp, s);
      if (ep.dp_partial && me.lane == 0) ep.dp_partial[row * ep.dp_stride + n_block] = dp;
    }
  }
}

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
      dglu_drain<kOp, S>(tile, p, ep, rows, c.n_block * S::G::kN, c.n_block);
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
// order.
template <int kCluster>
__device__ __forceinline__ void dgrad_store_epilogue_warps(const DgradProblem& p,
                                                           const SharedLayout& smem,
                                                           const TileShape& shape,
                                                           const ClusterUnits& units) {
  TileHandoff h = TileHandoff::of(smem);
  for (int u = units.first; u < units.total; u += units.step) {
    const UnitTile w = cluster_unit_tile<kCluster>(u, p.offsets, smem.tile_start, p.num_experts,
                                                   shape, units.rank);
    if (!w.live) continue;
    const TileCoord& c = w.tile;
    const TileRows rows = tile_rows<kBlockM>(p, c);
    receive_tile(h, handoff_parts(p.d_fp32), [&](int part, const uint8_t* tile) {
      drain_output<false>(tile, part, p.d, p.d_fp32, p.n, p.n, rows.first, rows.end,
                          c.n_block * kBlockN);
    });
  }
}

}  // namespace moefuse::gemm::bwd
