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
      float g[8], u[8], out[8];
      cuda::unpack_bf16x8(gate, g);
      cuda::unpack_bf16x8(up, u);
      if (ep.pre) {
        uint4* pre = reinterpret_cast<uint4*>(ep.pre + int64_t{row} * p.n + n0 + 16 * q);
        pre[0] = gate;
        pre[1] = up;
      }
      const float scale = ep.row_scale ? __ldg(ep.row_scale + row) : 1.0f;
#pragma unroll
      for (int i = 0; i < 8; ++i) out[i] = apply_op<kOp>(ep, g[i], u[i]) * scale;
      *reinterpret_cast<uint4*>(d + int64_t{row} * p.n_out + n0 / 2 + 8 * q) =
          cuda::pack_bf16x8(out);
    }
  } else {
    for (int item = worker; item < kRows * kChunks; item += workers) {
      const int r = item / kChunks, c = item % kChunks;
      const int row = row_first + r, col = n0 + 8 * c;
      if (row >= row_end || col >= p.n) continue;
      const uint4 staged = *reinterpret_cast<const uint4*>(tile + r * kPitch + c * 16);
      if (ep.pre) *reinterpret_cast<uint4*>(ep.pre + int64_t{row} * p.n + col) = staged;
      float v[8];
      cuda::unpack_bf16x8(staged, v);
      const float scale = ep.row_scale ? __ldg(ep.row_scale + row) : 1.0f;
#pragma unroll
      for (int i = 0; i < 8; ++i) v[i] = apply_op<kOp>(ep, v[i], 0.0f) * scale;
      *reinterpret_cast<uint4*>(d + int64_t{row} * p.n_out + col) = cuda::pack_bf16x8(v);
    }
  }
}

}  // namespace moefuse::gemm
