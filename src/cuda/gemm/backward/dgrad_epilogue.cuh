// The dgrad kernel's epilogues.
//
// store_slab (staged_store.cuh): D = acc (bf16 or fp32) through the warpgroup's staging buffer.
//
// dglu_slab<kOp> (FC2 dgrad): the accumulator is g = dys·W2[e] for output columns f of F. Per
// chunk of 32 columns of the warpgroup's 64 × 256 slab:
//   1. every thread writes its g pairs (fp32, the accumulator layout of mainloop.cuh's
//      AccPosition) into the staging buffer; named barrier;
//   2. thread t finishes slab row t / 2, octets 2·(t % 2) and 2·(t % 2) + 1 of the chunk (8
//      columns f0 .. f0 + 7 each): 16-byte loads of the saved pre (GLU: gate f0.. at interleaved
//      column 2·f0, up 8 columns later — the interleave of 8; squared ReLU: column f0), the
//      activation and its derivatives, and 16-byte stores of d_pre = act'(pre) ⊙ (p·g)
//      (interleaved like pre) and scaled_act = p·act; named barrier before the buffer's reuse.
//   dp: each thread sums g·act over its octets in ascending column order, the two threads of a
//   row add their sums (xor-shuffle 1), and the even one stores the (row, n-block) partial:
//   deterministic.
// Rows at or past the expert's end and octets at or past n are neither read nor written (n % 8
// == 0: an octet is entirely in or out).
//
// Code size: the activation is a template parameter (one switch, dglu_tile), and the chunk loop
// is not unrolled: only step 1, which must name the accumulators at compile time, is repeated
// per chunk (8 × 16 shared stores). The fully unrolled per-element form with a runtime switch was
// 612 KiB of SASS; unrolled per op still 100 KiB (docs/grouped_gemm_backward.md).
#pragma once

#include <cuda_bf16.h>

#include <cstdint>
#include <utility>

#include "cuda/gemm/backward/activation_backward.h"
#include "cuda/gemm/backward/mainloop.cuh"
#include "cuda/gemm/backward/params.h"
#include "cuda/gemm/backward/staged_store.cuh"
#include "cuda/gemm/epilogues/tile_epilogue.cuh"  // unpack8, pack8

namespace moefuse::gemm::bwd {

inline constexpr int kDgluChunkCols = kStageChunkBytes / 4;                 // 32 fp32 g columns
inline constexpr int kDgluChunks = kBlockN / kDgluChunkCols;               // 8
inline constexpr int kDgluThreadsPerRow = kWarpgroupThreads / kStageRows;  // 2
inline constexpr int kDgluOctetsPerThread = kDgluChunkCols / 8 / kDgluThreadsPerRow;  // 2

// Step 1 for chunk kChunk.
template <int kChunk>
__device__ __forceinline__ void stage_g_chunk(const float (&acc)[128], uint8_t* stage,
                                              const AccPosition& pos) {
#pragma unroll
  for (int jj = 0; jj < kDgluChunkCols / 8; ++jj) {
    const int j = kChunk * (kDgluChunkCols / 8) + jj;
#pragma unroll
    for (int h = 0; h < 2; ++h)
      stage_pair(stage, pos.row + 8 * h, (8 * jj + pos.col) * 4, acc[4 * j + 2 * h],
                 acc[4 * j + 2 * h + 1], float{});
  }
}

// Step 1 for the runtime chunk c: the accumulators must be named at compile time, so one
// branch per chunk.
template <size_t... kChunk>
__device__ __forceinline__ void stage_g_chunk(const float (&acc)[128], uint8_t* stage,
                                              const AccPosition& pos, int c,
                                              std::index_sequence<kChunk...>) {
  ((c == static_cast<int>(kChunk) ? stage_g_chunk<kChunk>(acc, stage, pos) : void()), ...);
}

// The row this thread finishes in step 2.
struct DgluRow {
  bool valid;
  float scale;                // p
  const __nv_bfloat16* pre;   // row start
  __nv_bfloat16* d_pre;       // row start
  __nv_bfloat16* scaled_act;  // row start, or null
};

// Step 2 for one octet: g from the buffer (fp32), pre from global memory, f0 = its first column.
template <EpilogueOp kOp>
__device__ __forceinline__ void finish_octet(const EpilogueParams& act_params, const DgluRow& row,
                                             const uint8_t* staged_g, int f0, float& dp) {
  constexpr bool kGlu = is_glu_op(kOp);
  float g[8], gate[8], up[8], d_gate[8], d_up[8], act[8];
  const float4 g_lo = *reinterpret_cast<const float4*>(staged_g);
  const float4 g_hi = *reinterpret_cast<const float4*>(staged_g + 16);
  g[0] = g_lo.x, g[1] = g_lo.y, g[2] = g_lo.z, g[3] = g_lo.w;
  g[4] = g_hi.x, g[5] = g_hi.y, g[6] = g_hi.z, g[7] = g_hi.w;
  const int gate_col = kGlu ? 2 * f0 : f0;
  unpack8(*reinterpret_cast<const uint4*>(row.pre + gate_col), gate);
  if constexpr (kGlu) unpack8(*reinterpret_cast<const uint4*>(row.pre + gate_col + 8), up);
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    const ActivationGrad a = activation_grad_op<kOp>(act_params, gate[i], kGlu ? up[i] : 0.0f);
    dp = fmaf(g[i], a.value, dp);
    const float d_act = row.scale * g[i];
    d_gate[i] = d_act * a.d_gate;
    d_up[i] = d_act * a.d_up;
    act[i] = row.scale * a.value;
  }
  *reinterpret_cast<uint4*>(row.d_pre + gate_col) = pack8(d_gate);
  if constexpr (kGlu) *reinterpret_cast<uint4*>(row.d_pre + gate_col + 8) = pack8(d_up);
  if (row.scaled_act) *reinterpret_cast<uint4*>(row.scaled_act + f0) = pack8(act);
}

template <EpilogueOp kOp>
__device__ __forceinline__ void dglu_slab(const float (&acc)[128], const DgradProblem& p,
                                          const DGluEpilogue& ep, uint8_t* stage, int slab,
                                          int row_first, int row_end, int n0, int n_block) {
  const int pre_cols = is_glu_op(kOp) ? 2 * p.n : p.n;
  const AccPosition pos = AccPosition::of_thread();
  const int tid = threadIdx.x % kWarpgroupThreads;
  const int r = tid / kDgluThreadsPerRow;
  const int first_octet = kDgluOctetsPerThread * (tid % kDgluThreadsPerRow);
  const int row_index = row_first + r;
  DgluRow row{.valid = row_index < row_end};
  const int64_t safe_row = row.valid ? row_index : 0;
  row.scale = row.valid && ep.row_scale ? __ldg(ep.row_scale + row_index) : 1.0f;
  row.pre = ep.pre + safe_row * pre_cols;
  row.d_pre = ep.d_pre + safe_row * pre_cols;
  row.scaled_act = ep.scaled_act ? ep.scaled_act + safe_row * p.n : nullptr;

  float dp = 0.0f;
#pragma unroll 1
  for (int c = 0; c < kDgluChunks; ++c) {
    stage_g_chunk(acc, stage, pos, c, std::make_index_sequence<kDgluChunks>{});
    slab_barrier(slab);
#pragma unroll
    for (int k = 0; k < kDgluOctetsPerThread; ++k) {
      const int octet = first_octet + k;
      const int f0 = n0 + kDgluChunkCols * c + 8 * octet;
      if (row.valid && f0 < p.n)
        finish_octet<kOp>(ep.act, row, stage + r * kStagePitch + octet * 32, f0, dp);
    }
    slab_barrier(slab);
  }

  // Both lanes of a row take part in the shuffle (rows past the end add unused zeros).
  dp += __shfl_xor_sync(0xffffffffu, dp, 1);
  if (row.valid && ep.dp_partial && tid % kDgluThreadsPerRow == 0)
    ep.dp_partial[static_cast<int64_t>(row_index) * ep.dp_blocks + n_block] = dp;
}

__device__ __forceinline__ void dglu_tile(const float (&acc)[128], const DgradProblem& p,
                                          const DGluEpilogue& ep, uint8_t* stage, int slab,
                                          int row_first, int row_end, int n0, int n_block) {
  dispatch_epilogue_op(ep.act.op, [&](auto op) {
    dglu_slab<decltype(op)::value>(acc, p, ep, stage, slab, row_first, row_end, n0, n_block);
  });
}

}  // namespace moefuse::gemm::bwd
