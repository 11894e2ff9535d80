// The fused epilogue: bias, activation and row scale applied to the wgmma accumulators in
// registers, results written through the staging buffer (staged_store.cuh) as full row segments.
//
// Accumulator layout of wgmma m64nNk16 (f32), thread t of the warpgroup, warp w = t / 32,
// lane l = t % 32: acc[4j + 2h + i] holds row 16w + l/4 + 8h, column 8j + 2(l % 4) + i
// (j < N/8, h, i ∈ {0, 1}). Each thread thus owns column pairs, and with the GLU interleave of
// 8 (gate block 2q, up block 2q + 1 of 8 columns each) the gate and the up value of an output sit
// in the same thread: gate = acc[4·2q + 2h + i], up = acc[4·(2q+1) + 2h + i], output column
// 8q + 2(l % 4) + i of the tile's 128 outputs.
//
// Rows at or past the expert's end (the next expert's rows, or rows past m_cap) are not written;
// neither are columns at or past N (N % 8 == 0, N % 16 == 0 for GLU, so a 16-byte chunk of a row
// is entirely in or entirely out).
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

#include "cuda/gemm/config.h"
#include "cuda/gemm/epilogues/activation.h"
#include "cuda/gemm/epilogues/bias_pair.cuh"
#include "cuda/gemm/epilogues/staged_store.cuh"
#include "cuda/gemm/params.h"

namespace moefuse::gemm {

// stage: this warpgroup's staging buffer; row_first: the first row of its 64-row slab;
// row_end: exclusive; n0: first column of h in this tile.
template <class OutT, EpilogueOp kOp>
__device__ __forceinline__ void epilogue_tile_op(const float (&acc)[128], const GemmProblem& p,
                                              const EpilogueParams& ep, uint8_t* stage, int slab,
                                              int expert, int row_first, int row_end, int n0) {
  constexpr int kOut = sizeof(OutT);
  constexpr int kOutPerChunk = kStageChunkBytes / kOut;  // 64 bf16 or 32 fp32 outputs
  const int lane = threadIdx.x % 32;
  const int warp = (threadIdx.x / 32) % 4;
  const int pair_col = 2 * (lane % 4);
  const float* bias = ep.bias ? ep.bias + static_cast<int64_t>(expert) * p.n : nullptr;
  int local_row[2];
  float scale[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    local_row[h] = 16 * warp + lane / 4 + 8 * h;
    const int row = row_first + local_row[h];
    scale[h] = ep.row_scale && row < row_end ? __ldg(ep.row_scale + row) : 1.0f;
  }
  auto flush = [&](int pitch, void* dst, int row_bytes, int byte_first) {
    warpgroup_barrier(slab);
    flush_stage(stage, pitch, static_cast<uint8_t*>(dst), row_bytes, row_first, row_end,
                byte_first, row_bytes);
    warpgroup_barrier(slab);
  };

  // The pre-activation h (+ bias), bf16, in the weight's (interleaved) column order.
  if (ep.pre) {
    constexpr int kJPerChunk = kStageChunkBytes / 2 / 8;  // 8 column octets of bf16
#pragma unroll
    for (int c = 0; c < kBlockN / 8 / kJPerChunk; ++c) {
#pragma unroll
      for (int jj = 0; jj < kJPerChunk; ++jj) {
        const int j = c * kJPerChunk + jj;
        const float2 b = bias_pair(bias, n0 + 8 * j + pair_col, p.n);
#pragma unroll
        for (int h = 0; h < 2; ++h)
          stage_pair<__nv_bfloat16>(stage, local_row[h], (8 * jj + pair_col) * 2,
                                    acc[4 * j + 2 * h] + b.x, acc[4 * j + 2 * h + 1] + b.y);
      }
      flush(stage_pitch<__nv_bfloat16>(), ep.pre, p.n * 2, (n0 + c * kJPerChunk * 8) * 2);
    }
  }

  if constexpr (is_glu_op(kOp)) {
    constexpr int kQPerChunk = kOutPerChunk / 8;
#pragma unroll
    for (int c = 0; c < kBlockN / 2 / kOutPerChunk; ++c) {
#pragma unroll
      for (int qq = 0; qq < kQPerChunk; ++qq) {
        const int q = c * kQPerChunk + qq;
        const int col_gate = n0 + 16 * q + pair_col;
        const float2 bg = bias_pair(bias, col_gate, p.n);
        const float2 bu = bias_pair(bias, col_gate + 8, p.n);
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const float g0 = acc[8 * q + 2 * h] + bg.x, g1 = acc[8 * q + 2 * h + 1] + bg.y;
          const float u0 = acc[8 * q + 4 + 2 * h] + bu.x, u1 = acc[8 * q + 4 + 2 * h + 1] + bu.y;
          stage_pair<OutT>(stage, local_row[h], (8 * qq + pair_col) * kOut,
                           apply_op<kOp>(ep, g0, u0) * scale[h],
                           apply_op<kOp>(ep, g1, u1) * scale[h]);
        }
      }
      flush(stage_pitch<OutT>(), p.d, p.n_out * kOut, (n0 / 2 + c * kOutPerChunk) * kOut);
    }
  } else {
    constexpr int kJPerChunk = kOutPerChunk / 8;
#pragma unroll
    for (int c = 0; c < kBlockN / kOutPerChunk; ++c) {
#pragma unroll
      for (int jj = 0; jj < kJPerChunk; ++jj) {
        const int j = c * kJPerChunk + jj;
        const float2 b = bias_pair(bias, n0 + 8 * j + pair_col, p.n);
#pragma unroll
        for (int h = 0; h < 2; ++h)
          stage_pair<OutT>(stage, local_row[h], (8 * jj + pair_col) * kOut,
                           apply_op<kOp>(ep, acc[4 * j + 2 * h] + b.x, 0.0f) * scale[h],
                           apply_op<kOp>(ep, acc[4 * j + 2 * h + 1] + b.y, 0.0f) * scale[h]);
      }
      flush(stage_pitch<OutT>(), p.d, p.n_out * kOut, (n0 + c * kOutPerChunk) * kOut);
    }
  }
}

template <class OutT>
__device__ __forceinline__ void epilogue_tile(const float (&acc)[128], const GemmProblem& p,
                                              const EpilogueParams& ep, uint8_t* stage, int slab,
                                              int expert, int row_first, int row_end, int n0) {
  dispatch_epilogue_op(ep.op, [&](auto op) {
    epilogue_tile_op<OutT, decltype(op)::value>(acc, p, ep, stage, slab, expert, row_first,
                                                row_end, n0);
  });
}

}  // namespace moefuse::gemm
