// The FP8 kernel's in-consumer forward epilogue, for fp32 output (which must not round h, so it
// cannot go through the bf16 tile buffer of the overlapped epilogue, staged_tile.cuh, and an
// fp32 buffer of 64 KB would cost two pipeline stages): bias, activation (GLU on interleaved
// columns, squared ReLU or none) and row scale applied to the promoted fp32 accumulators, stored
// straight from registers after the K loop. (The dgrad's dGLU, too, goes through the tile buffer:
// dglu_handoff.cuh.)
//
// Accumulator layout as in mainloop.cuh: acc[4j + 2h + i] is row 16·warp + lane/4 + 8h of the
// slab, column 8j + 2·(lane % 4) + i of the tile. With the GLU interleave of 8 (gate block 2q,
// up block 2q + 1), gate and up of an output sit in the same thread: gate = acc[8q + 2h + i],
// up = acc[8q + 4 + 2h + i], output column n0/2 + 8q + 2·(lane % 4) + i.
//
// Rows at or past the expert's end (the next expert's rows, rows past m_cap) are not written;
// neither are columns at or past N (N % 8 == 0, N % 16 == 0 for GLU: a thread's column pair is
// entirely in or out).
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

#include "cuda/gemm/epilogues/activation.h"
#include "cuda/gemm/epilogues/bias_pair.cuh"
#include "cuda/gemm/fp8/config.h"
#include "cuda/gemm/fp8/params.h"
#include "cuda/packed_values.cuh"

namespace moefuse::gemm::fp8 {

// slab_first: the first row of this warpgroup's 64-row slab; row_end: exclusive; n0: first
// column of h in this tile; expert: the tile's expert (selects the bias row).
template <class OutT, EpilogueOp kOp>
__device__ __forceinline__ void epilogue_tile_op(const float (&acc)[Tile128::kAccumulators],
                                                 const Fp8GemmProblem& p, const EpilogueParams& ep,
                                                 int expert, int slab_first, int row_end, int n0) {
  const int lane = threadIdx.x % 32, warp = (threadIdx.x / 32) % 4;
  const int pair_col = 2 * (lane % 4);
  OutT* d = static_cast<OutT*>(p.d);
  const float* bias = ep.bias ? ep.bias + static_cast<int64_t>(expert) * p.n : nullptr;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int row = slab_first + 16 * warp + lane / 4 + 8 * h;
    if (row >= row_end) continue;
    const float scale = ep.row_scale ? __ldg(ep.row_scale + row) : 1.0f;
    OutT* out = d + static_cast<int64_t>(row) * p.n_out;
    if constexpr (is_glu_op(kOp)) {
#pragma unroll
      for (int q = 0; q < kBlockN / 16; ++q) {
        if (n0 + 16 * q >= p.n) break;
        const float* g = &acc[8 * q + 2 * h];
        const float* u = &acc[8 * q + 4 + 2 * h];
        const float2 bg = gemm::bias_pair(bias, n0 + 16 * q + pair_col, p.n);
        const float2 bu = gemm::bias_pair(bias, n0 + 16 * q + 8 + pair_col, p.n);
        cuda::store_pair(out + n0 / 2 + 8 * q + pair_col,
                         apply_op<kOp>(ep, g[0] + bg.x, u[0] + bu.x) * scale,
                         apply_op<kOp>(ep, g[1] + bg.y, u[1] + bu.y) * scale);
      }
    } else {
#pragma unroll
      for (int j = 0; j < kBlockN / 8; ++j) {
        if (n0 + 8 * j >= p.n) break;
        const float* v = &acc[4 * j + 2 * h];
        const float2 b = gemm::bias_pair(bias, n0 + 8 * j + pair_col, p.n);
        cuda::store_pair(out + n0 + 8 * j + pair_col, apply_op<kOp>(ep, v[0] + b.x, 0.0f) * scale,
                         apply_op<kOp>(ep, v[1] + b.y, 0.0f) * scale);
      }
    }
  }
}

template <class OutT>
__device__ __forceinline__ void epilogue_tile(const float (&acc)[Tile128::kAccumulators],
                                              const Fp8GemmProblem& p, const EpilogueParams& ep,
                                              int expert, int slab_first, int row_end, int n0) {
  dispatch_epilogue_op(ep.op, [&](auto op) {
    epilogue_tile_op<OutT, decltype(op)::value>(acc, p, ep, expert, slab_first, row_end, n0);
  });
}

}  // namespace moefuse::gemm::fp8
