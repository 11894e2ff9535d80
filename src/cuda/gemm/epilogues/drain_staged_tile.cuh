// The epilogue warps' side of the overlapped epilogue, shared by the BF16 and FP8 forward
// kernels: a staged tile of bf16 h (+ bias) [kRows × kCols, kPitch bytes a row] → D (bf16), while
// the tensor cores work on the next tile (hand-off protocol: common/tile_handoff.cuh).
//
// Activation and row scale 8 outputs a step, 16-byte stores, masked by rows (< the expert's end)
// and columns (< N; N % 8 == 0, N % 16 == 0 for GLU, so an 8-column chunk or a 16-column GLU pair
// is entirely in or out). With ep.pre, the staged chunks just read also go to the
// pre-activation (16-byte copies, the same masks), so the tile is read from shared memory once.
// The activation reads h rounded to bf16: exactly the saved pre-activation, so the backward from
// the cached pre and a recompute agree bit for bit.
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

#include "cuda/gemm/common/smem_descriptor.cuh"
#include "cuda/gemm/epilogues/activation.h"
#include "cuda/gemm/params.h"
#include "cuda/packed_values.cuh"

namespace moefuse::gemm {

// Eight outputs as bf16: activation (GLU of 8 gate and 8 up values) times the row scale, each
// rounded once. The FP8 GEMM's E4M3 output quantises exactly these (fp8/e4m3_drain.cuh).
template <EpilogueOp kOp>
__device__ __forceinline__ uint4 activate_glu8(const EpilogueParams& ep, uint4 gate, uint4 up,
                                               float scale) {
  float g[8], u[8], out[8];
  cuda::unpack_bf16x8(gate, g);
  cuda::unpack_bf16x8(up, u);
#pragma unroll
  for (int i = 0; i < 8; ++i) out[i] = apply_op<kOp>(ep, g[i], u[i]) * scale;
  return cuda::pack_bf16x8(out);
}
template <EpilogueOp kOp>
__device__ __forceinline__ uint4 activate8(const EpilogueParams& ep, uint4 staged, float scale) {
  float v[8];
  cuda::unpack_bf16x8(staged, v);
#pragma unroll
  for (int i = 0; i < 8; ++i) v[i] = apply_op<kOp>(ep, v[i], 0.0f) * scale;
  return cuda::pack_bf16x8(v);
}

// The row scale of row `row` (1 without one).
__device__ __forceinline__ float row_scale_of(const EpilogueParams& ep, int row) {
  return ep.row_scale ? __ldg(ep.row_scale + row) : 1.0f;
}

// Problem: any struct with n, n_out and d (GemmProblem, fp8::Fp8GemmProblem). `worker` in
// [0, workers).
template <EpilogueOp kOp, int kRows, int kCols, int kPitch, class Problem>
__device__ __forceinline__ void drain_staged_tile(const uint8_t* tile, const Problem& p,
                                                  const EpilogueParams& ep, int row_first,
                                                  int row_end, int n0, int worker, int workers) {
  constexpr int kChunks = kCols / 8;  // 16-byte pieces of a staged row
  assume_shared(tile);
  auto* d = static_cast<__nv_bfloat16*>(p.d);
  if constexpr (is_glu_op(kOp)) {
    // Gate chunk 2q and up chunk 2q + 1 (8 columns each) give outputs n0/2 + 8q .. + 7.
    constexpr int kPairs = kChunks / 2;
    for (int item = worker; item < kRows * kPairs; item += workers) {
      const int r = item / kPairs, q = item % kPairs;
      const int row = row_first + r;
      if (row >= row_end || n0 + 16 * q >= p.n) continue;
      const uint4 gate = *reinterpret_cast<const uint4*>(tile + r * kPitch + q * 32);
      const uint4 up = *reinterpret_cast<const uint4*>(tile + r * kPitch + q * 32 + 16);
      if (ep.pre) {
        uint4* pre = reinterpret_cast<uint4*>(ep.pre + int64_t{row} * p.n + n0 + 16 * q);
        pre[0] = gate;
        pre[1] = up;
      }
      *reinterpret_cast<uint4*>(d + int64_t{row} * p.n_out + n0 / 2 + 8 * q) =
          activate_glu8<kOp>(ep, gate, up, row_scale_of(ep, row));
    }
  } else {
    for (int item = worker; item < kRows * kChunks; item += workers) {
      const int r = item / kChunks, c = item % kChunks;
      const int row = row_first + r, col = n0 + 8 * c;
      if (row >= row_end || col >= p.n) continue;
      const uint4 staged = *reinterpret_cast<const uint4*>(tile + r * kPitch + c * 16);
      if (ep.pre) *reinterpret_cast<uint4*>(ep.pre + int64_t{row} * p.n + col) = staged;
      *reinterpret_cast<uint4*>(d + int64_t{row} * p.n_out + col) =
          activate8<kOp>(ep, staged, row_scale_of(ep, row));
    }
  }
}

}  // namespace moefuse::gemm
