// The FP8 kernel's third epilogue kind, the FC2 dgrad's dGLU, as both sides of the overlapped
// hand-off (common/tile_handoff.cuh); the FP8 twin of the BF16 dgrad's, with its contract
// (bwd::DGluEpilogue):
//   g = the promoted fp32 accumulator, n = F;  with p = row_scale[r] (1 when absent)
//   d_pre = act'(pre) ⊙ (p·g)   bf16, pre's interleaved column order
//   scaled_act = p·act(pre)      bf16 [M_cap, F] (optional)
//   dp_partial[r, n_block] = Σ_{f in the tile} g·act   (optional; dp_reduce adds the blocks)
// Consumers (stage_g): their 64 rows of g, rounded to bf16 and unscaled, into the tile buffer
//   (config.h: 128 rows × 128 bf16, pitch 272; there in every instantiation, so this costs no
//   pipeline stage) by the BF16 dgrad's staging (backward/tile_handoff.cuh send_part), then
//   straight on to the next tile's mainloop.
// Epilogue warps, warps 1-3 of warpgroup 0, at short K also the four of warpgroup 3 (drain_g;
//   config.h, Roles): the BF16 dgrad's drain (backward/dglu_drain.cuh): at 128 columns a warp
//   finishes two rows side by side, six (seven warps: four) rows' pre loads in flight a lane;
//   reading pre and writing d_pre, scaled_act and dp overlaps the tensor cores' next tile
//   instead of following it.
//
// Precision: g reaches the dGLU rounded to bf16, as in the BF16 kernel (its unfused twin's and
// torch's g): d_pre and dp carry one more bf16 rounding than the fp32 g of the in-consumer
// epilogue this replaces gave (an fp32 buffer, 64 KiB, would cost two stages). The reference,
// ref::fc2_dgrad_fp8, rounds g alike.
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

#include "cuda/gemm/backward/dglu_drain.cuh"
#include "cuda/gemm/backward/params.h"
#include "cuda/gemm/backward/tile_handoff.cuh"
#include "cuda/gemm/common/smem_descriptor.cuh"
#include "cuda/gemm/common/tile_handoff.cuh"
#include "cuda/gemm/common/tile_rows.cuh"
#include "cuda/gemm/fp8/config.h"
#include "cuda/gemm/fp8/params.h"

namespace moefuse::gemm::fp8 {

static_assert(kBlockM == bwd::kBlockM, "send_part and the drain assume the BF16 dgrad's 128 rows");

// Consumer warpgroup `slab`: its rows of g into the buffer once the last tile is drained.
__device__ __forceinline__ void stage_g(const float (&acc)[Tile128::kAccumulators],
                                        TileHandoff& handoff, int slab) {
  bwd::send_part<__nv_bfloat16, 0, Tile128::kTilePitch>(acc, handoff, slab);
}

// The kWarps epilogue warps, kOctets octets in flight a lane (config.h, Roles): the dGLU of the
// staged tile of n-block n_block.
template <EpilogueOp kOp, int kWarps, int kOctets>
__device__ __forceinline__ void drain_g(const uint8_t* tile, const Fp8GemmProblem& p,
                                        const bwd::DGluEpilogue& ep, const TileRows& rows,
                                        int n_block) {
  assume_shared(tile);  // g by LDS, not generic loads
  bwd::dglu_drain<kOp, kBlockN, Tile128::kTilePitch, kWarps, kOctets>(tile, p.n, ep, rows,
                                                                     n_block * kBlockN, n_block);
}

}  // namespace moefuse::gemm::fp8
