// The overlapped epilogue: consumers hand the finished tile to the epilogue warps through shared
// memory and go straight back to the mainloop, so bias, activation, row scale and every global
// store of tile i run while the tensor cores work on tile i + 1.
//
// Hand-off (one tile buffer, two mbarriers: common/tile_handoff.cuh has the protocol), once per
// tile:
//   consumers (256 threads): write h + bias as bf16 into the tile buffer [128 rows × 256
//     columns, row pitch 528 bytes, so a warp's 8 rows of 16-byte pieces hit all 32 banks].
//   epilogue warps (96 threads): store the saved pre-activation (16-byte copies) and the
//     activated, scaled output (8 outputs per thread step) with the row mask (rows < the
//     expert's end) and the column mask (columns < N).
// The activation thus reads the bf16-rounded h, exactly the pre-activation saved for backward
// (so the forward and the backward's recomputation agree) and what an unfused bf16 path computes.
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

#include "cuda/gemm/config.h"
#include "cuda/gemm/epilogues/activation.h"
#include "cuda/gemm/params.h"
#include "cuda/packed_values.cuh"

namespace moefuse::gemm {

inline constexpr int kTilePitch = kBlockN * 2 + 16;  // bytes per staged row
static_assert(kTilePitch * kBlockM == kTileStageBytes, "config.h's shared-memory budget");

// Epilogue-warp side: the staged tile → global memory. `worker` in [0, workers).
template <EpilogueOp kOp>
__device__ __forceinline__ void drain_tile(const uint8_t* tile, const GemmProblem& p,
                                           const EpilogueParams& ep, int row_first, int row_end,
                                           int n0, int worker, int workers) {
  constexpr int kChunks = kBlockN / 8;  // 16-byte pieces of a staged row
  if (ep.pre) {
    for (int item = worker; item < kBlockM * kChunks; item += workers) {
      const int r = item / kChunks, c = item % kChunks;
      const int row = row_first + r, col = n0 + 8 * c;
      if (row < row_end && col < p.n)
        *reinterpret_cast<uint4*>(ep.pre + int64_t{row} * p.n + col) =
            *reinterpret_cast<const uint4*>(tile + r * kTilePitch + c * 16);
    }
  }
  auto* d = static_cast<__nv_bfloat16*>(p.d);
  if constexpr (is_glu_op(kOp)) {
    // Gate block 2q and up block 2q + 1 (8 columns each) give outputs 8q .. 8q + 7.
    constexpr int kPairs = kChunks / 2;
    for (int item = worker; item < kBlockM * kPairs; item += workers) {
      const int r = item / kPairs, q = item % kPairs;
      const int row = row_first + r;
      if (row >= row_end || n0 + 16 * q >= p.n) continue;
      float g[8], u[8], out[8];
      cuda::unpack_bf16x8(*reinterpret_cast<const uint4*>(tile + r * kTilePitch + q * 32), g);
      cuda::unpack_bf16x8(*reinterpret_cast<const uint4*>(tile + r * kTilePitch + q * 32 + 16), u);
      const float scale = ep.row_scale ? __ldg(ep.row_scale + row) : 1.0f;
#pragma unroll
      for (int i = 0; i < 8; ++i) out[i] = apply_op<kOp>(ep, g[i], u[i]) * scale;
      *reinterpret_cast<uint4*>(d + int64_t{row} * p.n_out + n0 / 2 + 8 * q) = cuda::pack_bf16x8(out);
    }
  } else {
    for (int item = worker; item < kBlockM * kChunks; item += workers) {
      const int r = item / kChunks, c = item % kChunks;
      const int row = row_first + r, col = n0 + 8 * c;
      if (row >= row_end || col >= p.n) continue;
      float v[8];
      cuda::unpack_bf16x8(*reinterpret_cast<const uint4*>(tile + r * kTilePitch + c * 16), v);
      const float scale = ep.row_scale ? __ldg(ep.row_scale + row) : 1.0f;
#pragma unroll
      for (int i = 0; i < 8; ++i) v[i] = apply_op<kOp>(ep, v[i], 0.0f) * scale;
      *reinterpret_cast<uint4*>(d + int64_t{row} * p.n_out + col) = cuda::pack_bf16x8(v);
    }
  }
}

}  // namespace moefuse::gemm
