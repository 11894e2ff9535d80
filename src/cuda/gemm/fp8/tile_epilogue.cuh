// The FP8 forward's overlapped epilogue (bf16 output): the consumers hand the promoted tile to
// the epilogue warps through shared memory and go straight back to the mainloop, so bias,
// activation, row scale and the global stores of tile i run while the tensor cores work on
// tile i + 1 (the BF16 kernel's scheme, docs/grouped_gemm.md; hand-off protocol:
// common/tile_handoff.cuh).
//
// Once per tile:
//   consumers (256 threads): h + bias as bf16 into the tile buffer [128 rows × 128 columns,
//     272-byte pitch: config.h].
//   epilogue warps (96 threads): activation and row scale, 8 outputs a step, 16-byte stores,
//     masked by rows (< the expert's end) and columns (< N; N % 8 == 0, N % 16 == 0 for GLU, so
//     an 8-column chunk or a 16-column GLU pair is entirely in or out); with ep.pre, the staged
//     chunks they just read also go to the pre-activation (16-byte copies, the same masks), so
//     the tile is read from shared memory once.
// The activation thus reads h rounded to bf16, as in the BF16 kernel: exactly the saved
// pre-activation, so the backward from the cached pre and a recompute by the linear FP8 GEMM
// (the same accumulation, the same rounding) agree bit for bit.
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

#include "cuda/gemm/epilogues/activation.h"
#include "cuda/gemm/fp8/config.h"
#include "cuda/gemm/fp8/params.h"
#include "cuda/packed_values.cuh"

namespace moefuse::gemm::fp8 {

// Epilogue-warp side: the staged tile → D (bf16). `worker` in [0, workers).
template <EpilogueOp kOp>
__device__ __forceinline__ void drain_tile(const uint8_t* tile, const Fp8GemmProblem& p,
                                           const EpilogueParams& ep, int row_first, int row_end,
                                           int n0, int worker, int workers) {
  constexpr int kChunks = kBlockN / 8;  // 16-byte pieces of a staged row
  auto* d = static_cast<__nv_bfloat16*>(p.d);
  if constexpr (is_glu_op(kOp)) {
    // Gate chunk 2q and up chunk 2q + 1 (8 columns each) give outputs n0/2 + 8q .. + 7.
    constexpr int kPairs = kChunks / 2;
    for (int item = worker; item < kBlockM * kPairs; item += workers) {
      const int r = item / kPairs, q = item % kPairs;
      const int row = row_first + r;
      if (row >= row_end || n0 + 16 * q >= p.n) continue;
      const uint4 gate = *reinterpret_cast<const uint4*>(tile + r * kTilePitch + q * 32);
      const uint4 up = *reinterpret_cast<const uint4*>(tile + r * kTilePitch + q * 32 + 16);
      if (ep.pre) {
        uint4* pre = reinterpret_cast<uint4*>(ep.pre + int64_t{row} * p.n + n0 + 16 * q);
        pre[0] = gate;
        pre[1] = up;
      }
      float g[8], u[8], out[8];
      cuda::unpack_bf16x8(gate, g);
      cuda::unpack_bf16x8(up, u);
      const float scale = ep.row_scale ? __ldg(ep.row_scale + row) : 1.0f;
#pragma unroll
      for (int i = 0; i < 8; ++i) out[i] = apply_op<kOp>(ep, g[i], u[i]) * scale;
      *reinterpret_cast<uint4*>(d + int64_t{row} * p.n_out + n0 / 2 + 8 * q) =
          cuda::pack_bf16x8(out);
    }
  } else {
    for (int item = worker; item < kBlockM * kChunks; item += workers) {
      const int r = item / kChunks, c = item % kChunks;
      const int row = row_first + r, col = n0 + 8 * c;
      if (row >= row_end || col >= p.n) continue;
      const uint4 staged = *reinterpret_cast<const uint4*>(tile + r * kTilePitch + c * 16);
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

}  // namespace moefuse::gemm::fp8
