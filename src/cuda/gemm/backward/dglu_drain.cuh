// The FC2 dgrad's dGLU as the epilogue warps finish it from a handed-over tile of g (bf16 in the
// tile buffer) of N columns, by W warps: shared by the BF16 dgrad (dgrad_epilogue.cuh: N = 256 or
// 192, W = 3 or 7) and the FP8 kernel (fp8/dglu_handoff.cuh: N = 128, W = 3 or 7). The contract
// is DGluEpilogue's (params.h), with g the tile's columns f of F.
//
// Which lane finishes which octets (8 columns) of which rows is DGluLaneMap's (dglu_lane_map.h):
// row groups of 8 lanes, four rows a warp. A lane keeps up to kOctets octets' pre loads in flight
// together (six; four in the FP8 kernel's seven-warp budget; run 9's profile found three warps
// of one-octet lanes latency-bound on them with four rows; g is read from the buffer only when
// used, so the registers go to loads in flight). A lane's octet of columns f0 .. f0 + 7: 16-byte
// loads of g from the buffer and of the saved pre (GLU: gate f0.. at interleaved column 2·f0, up
// 8 columns later — the interleave of 8; squared ReLU: column f0), the activation and its
// derivatives, 16-byte stores of d_pre = act'(pre) ⊙ (p·g) (interleaved like pre) and
// scaled_act = p·act. A row group's lanes thus read and write whole row segments: 4N bytes of
// pre and d_pre, 2N of scaled_act (GLU).
//   dp: each lane sums g·act over its octets' columns in order, a xor-shuffle tree adds the row
//   group's lanes, its first lane stores the (row, n-block) partial: deterministic.
//   Cache policy: pre, d_pre and scaled_act are touched once, so they are loaded and stored
//   `.cs` (evict-first) and not prefetched. Prefetching the next tile's pre rows into L2 (until
//   session 14) was evicted before its drain began: ncu counted 2.49 GB read by the BF16 dgrad on
//   qwen3, where dys, W2 and pre hold 1.34 GB; without it 1.73 GB and 7% less time.
// Rows at or past the expert's end and octets at or past n are neither read nor written (n % 8
// == 0: an octet is entirely in or out).
//
// Precision: g reaches the dGLU rounded to bf16 (a full fp32 tile does not fit next to either
// kernel's pipeline stages: 128 KiB for the BF16 dgrad, 64 KiB, two stages, for the FP8 kernel).
// That is the unfused twin's (and torch's) g; d_pre and dp carry one more bf16 rounding than an
// fp32 g would give (tests/gpu/grouped_gemm_backward_ops_test.cu, grouped_gemm_fp8_dgrad_test.cpp).
//
// Code size: the activation is a template parameter, chosen once per kernel (one switch around
// the tile loop); the per-row body is a lane's octets of the row.
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

#include "cuda/gemm/backward/activation_backward.h"
#include "cuda/gemm/backward/dglu_lane_map.h"
#include "cuda/gemm/backward/params.h"
#include "cuda/gemm/backward/tile_handoff.cuh"
#include "cuda/gemm/common/tile_rows.cuh"
#include "cuda/packed_values.cuh"

namespace moefuse::gemm::bwd {

// Octets a lane of the drain has in flight (their pre loads), unless the caller's register budget
// asks for fewer (the FP8 kernel's seven epilogue warps: fp8/config.h).
inline constexpr int kDGluOctets = 6;

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

// The dGLU of one handed-over tile: g in `tile` (kN bf16 columns a row, rows kPitch bytes apart),
// by the kWarps epilogue warps; rows from rows_of_tile.first (< rows_of_tile.end), columns from
// n0 (< n, F). kOctets: octets a lane has in flight (the default six: kDGluOctets).
template <EpilogueOp kOp, int kN, int kPitch, int kWarps, int kOctets = kDGluOctets>
__device__ __forceinline__ void dglu_drain(const uint8_t* tile, int n, const DGluEpilogue& ep,
                                           const TileRows& rows_of_tile, int n0, int n_block) {
  using Map = DGluLaneMap<kN, kWarps>;
  constexpr bool kGlu = is_glu_op(kOp);
  constexpr int kLanes = Map::kGroupLanes, kLaneOctets = Map::kLaneOctets;
  // Rows a lane has in flight: at most kOctets octets' loads, at least a row (256 columns: one
  // row of four octets; two spilled in the 384-thread kernel).
  constexpr int kRows = kOctets >= kLaneOctets ? kOctets / kLaneOctets : 1;
  constexpr int kStride = Map::kStride;
  constexpr int kPreHop = Map::octet(0, 1) * (kGlu ? 16 : 8);  // from a lane's octet to its next:
  constexpr int kActHop = Map::octet(0, 1) * 8;                // pre and scaled_act columns
  static_assert(kN * 2 <= kPitch);
  const int pre_cols = kGlu ? 2 * n : n;
  const EpilogueLane me = EpilogueLane::of_thread();
  const int side = Map::first_row(0, me.lane);  // the lane's row among its warp's side by side
  const int f0 = n0 + 8 * Map::octet(me.lane, 0);
  bool col_ok[kLaneOctets];
#pragma unroll
  for (int j = 0; j < kLaneOctets; ++j) col_ok[j] = n0 + 8 * Map::octet(me.lane, j) < n;
  const int gate_col = kGlu ? 2 * f0 : f0;
  const int rows = min(kBlockM, rows_of_tile.end - rows_of_tile.first);
  // The lane's row pointers, moved kStride rows a row (a 64-bit add each) rather than computed
  // from the row index (a 64-bit multiply-add and its carry chain, per pointer and row): ~17
  // fewer of the ~200 instructions of a row's octet, the fused FC2 dgrad 1-2% faster on every
  // preset (run 37, call 5), where the drain's instruction count sets the kernel's time (call 3).
  // Rows past the tile's get pointers too, never dereferenced.
  const int64_t first = rows_of_tile.first + Map::first_row(me.warp, me.lane);
  const int64_t pre_step = int64_t{kStride} * pre_cols, act_step = int64_t{kStride} * n;
  const int64_t dp_step = int64_t{kStride} * ep.dp_stride;
  const __nv_bfloat16* pre = ep.pre + first * pre_cols + gate_col;
  __nv_bfloat16* d_pre = ep.d_pre + first * pre_cols + gate_col;
  __nv_bfloat16* scaled_act = ep.scaled_act ? ep.scaled_act + first * n + f0 : nullptr;
  const float* row_scale = ep.row_scale ? ep.row_scale + first : nullptr;
  float* dp_partial = ep.dp_partial ? ep.dp_partial + first * ep.dp_stride + n_block : nullptr;
  // w0: the warp's first row of a step (uniform over the warp, unlike a lane's row w0 + side).
  for (int w0 = Map::first_row(me.warp, 0); w0 < rows; w0 += kStride * kRows) {
    uint4 gate_raw[kRows][kLaneOctets], up_raw[kRows][kLaneOctets];
#pragma unroll
    for (int i = 0; i < kRows; ++i, pre += pre_step) {
      const bool row_ok = w0 + kStride * i + side < rows;
#pragma unroll
      for (int j = 0; j < kLaneOctets; ++j) {
        if (row_ok && col_ok[j]) {
          gate_raw[i][j] = __ldcs(reinterpret_cast<const uint4*>(pre + kPreHop * j));
          up_raw[i][j] = kGlu ? __ldcs(reinterpret_cast<const uint4*>(pre + kPreHop * j + 8))
                              : uint4{};
        }
      }
    }
#pragma unroll
    for (int i = 0; i < kRows; ++i) {
      if (w0 + kStride * i >= rows) break;  // warp-uniform: the shuffles below see all 32 lanes
      const int r = w0 + kStride * i + side;
      const bool row_ok = r < rows;  // a side-by-side group's later rows may be past the end
      float dp = 0.0f;
      if (row_ok && col_ok[0]) {  // a lane's later octets lie further right than its first
        const float scale = row_scale ? __ldg(row_scale) : 1.0f;
#pragma unroll
        for (int j = 0; j < kLaneOctets; ++j) {
          if (j > 0 && !col_ok[j]) break;
          const uint8_t* g = tile + r * kPitch + 16 * Map::octet(me.lane, j);
          const float dp_j = finish_octet<kOp>(
              ep.act, scale, *reinterpret_cast<const uint4*>(g), gate_raw[i][j], up_raw[i][j],
              d_pre + kPreHop * j, scaled_act ? scaled_act + kActHop * j : nullptr);
          dp = j == 0 ? dp_j : dp + dp_j;
        }
      }
#pragma unroll
      for (int s = kLanes / 2; s > 0; s /= 2) dp += __shfl_xor_sync(0xffffffffu, dp, s);
      if (dp_partial && row_ok && Map::octet(me.lane, 0) == 0) *dp_partial = dp;
      d_pre += pre_step;
      if (scaled_act) scaled_act += act_step;
      if (row_scale) row_scale += kStride;
      if (dp_partial) dp_partial += dp_step;
    }
  }
}

}  // namespace moefuse::gemm::bwd
