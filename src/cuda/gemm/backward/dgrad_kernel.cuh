// The dgrad kernel: D[r] = A[r] · B[e] for the rows r of expert e, ragged M from device offsets,
// A [m_cap, K] K-major (one 2D TMA map), B [E, K, N] used as stored, i.e. MN-major (one 3D TMA
// map, boxes of 64 N × 64 K, expert outer). Persistent, warp-specialised, 384 threads.
//
// Timeline of a CTA:
//   all:        warp 0 scans the tile counts (the forward's scheduler: experts in turn, m-blocks
//               in groups of 8) into shared memory; thread 0 initialises the mbarriers;
//               __syncthreads (the only CTA-wide barrier).
//   warpgroup 0, thread 0 (producer): per stage 1 TMA for A (128 rows × 64 K) and 4 for B
//               (64 K × 4·64 N); rows past the expert are loaded (next expert's rows, or zeros
//               past m_cap) and masked in the epilogue; K and N tails are zero-filled by TMA.
//   warpgroup 0, warps 1-3 (epilogue warps): drain each finished tile from the tile buffer:
//               plain store or the FC2 dGLU epilogue (dgrad_epilogue.cuh).
//   warpgroups 1, 2 (consumers): wgmma m64n256k16 (A K-major, B MN-major) into 128 fp32
//               registers each, hand the tile over (tile_handoff.cuh: bf16 for bf16 D and the
//               dGLU's g, two fp32 halves for fp32 D) and go on with the next tile.
// Synchronisation: the stage mbarriers (mainloop.cuh) and the hand-off's tile_full/tile_empty
// (common/tile_handoff.cuh, protocol and hand walk there); no named barrier.
#pragma once

#include <cuda.h>

#include <cutlass/arch/reg_reconfig.h>

#include "cuda/gemm/backward/dgrad_epilogue.cuh"
#include "cuda/gemm/backward/mainloop.cuh"
#include "cuda/gemm/backward/tile_handoff.cuh"
#include "cuda/gemm/device_scheduler.cuh"
#include "cuda/gemm/tile_scheduler.h"

namespace moefuse::gemm::bwd {

__global__ void __launch_bounds__(kThreads, 1)
    dgrad_kernel(const __grid_constant__ CUtensorMap tmap_a,
                 const __grid_constant__ CUtensorMap tmap_b, const DgradProblem p,
                 const DGluEpilogue ep) {
  extern __shared__ uint8_t smem_raw[];
  const SharedLayout smem = SharedLayout::carve(smem_raw);
  const TileShape shape{.block_m = kBlockM, .block_n = kBlockN, .group_m = kGroupM,
                        .n_blocks = ceil_div(p.n, kBlockN)};
  if (threadIdx.x < 32) warp_tile_starts(p.offsets, p.num_experts, shape, smem.tile_start);
  if (threadIdx.x == 0) smem.init_barriers(1);
  __syncthreads();
  const int total_tiles = smem.tile_start[p.num_experts];
  using G = DgradStages;
  const int k_blocks = ceil_div(p.k, G::kBlockK);
  const int warpgroup = threadIdx.x / kWarpgroupThreads;

  if (warpgroup == 0) {
    cutlass::arch::warpgroup_reg_dealloc<kProducerRegs>();
    if (threadIdx.x >= 32) {
      dgrad_epilogue_warps(p, ep, smem, shape, total_tiles);
      return;
    }
    if (threadIdx.x != 0) return;
    PipelineState<G::kStages> pipe;
    for (int t = blockIdx.x; t < total_tiles; t += gridDim.x) {
      const TileCoord c = tile_coord(t, p.offsets, smem.tile_start, p.num_experts, shape);
      const int first_row = tile_rows<kBlockM>(p, c).first;
      for (int kb = 0; kb < k_blocks; ++kb) {
        ClusterBarrier::wait(&smem.empty[pipe.stage], pipe.phase ^ 1u);
        uint64_t* full = &smem.full[pipe.stage];
        ClusterTransactionBarrier::arrive_and_expect_tx(full, G::kABytes + G::kBBytes);
        cute::SM90_TMA_LOAD_2D::copy(&tmap_a, full, kCacheHintNormal, smem.a_stage(pipe.stage),
                                     kb * G::kBlockK, first_row);
        tma_mn_major_3d<G>(&tmap_b, full, smem.b_stage(pipe.stage), kBlockN / kMnChunk,
                           c.n_block * kBlockN, kb * G::kBlockK, c.expert);
        pipe.advance();
      }
    }
    return;
  }

  cutlass::arch::warpgroup_reg_alloc<kConsumerRegs>();
  const int slab = warpgroup - 1;
  const bool fp32_handoff = !ep.pre && p.d_fp32;
  TileHandoff handoff = TileHandoff::of(smem);
  float acc[128];
  PipelineState<G::kStages> pipe;
  for (int t = blockIdx.x; t < total_tiles; t += gridDim.x) {
    consume_tile<Major::K, Major::MN, G>(acc, k_blocks, smem, pipe, slab, [](int, int) {});
    hand_off_tile(acc, handoff, slab, fp32_handoff);
  }
}

}  // namespace moefuse::gemm::bwd
