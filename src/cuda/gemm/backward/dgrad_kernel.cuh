// The dgrad kernel: D[r] = A[r] · B[e] for the rows r of expert e, ragged M from device offsets,
// A [m_cap, K] K-major (one 2D TMA map), B [E, K, N] used as stored, i.e. MN-major (one 3D TMA
// map, boxes of 64 N × 64 K, expert outer). Persistent, warp-specialised. Three shapes
// (config.h DgradShape): the plain store (FC1 dgrad) and the FC2 dGLU for a long K, 128 × 256
// tiles and 384 threads; the FC2 dGLU for a short K, 128 × 192 tiles and 512 threads, the fourth
// warpgroup four more epilogue warps.
//
// Timeline of a CTA:
//   all:        warp 0 scans the tile counts (the forward's scheduler: experts in turn, m-blocks
//               in groups of 8) into shared memory; thread 0 initialises the mbarriers;
//               __syncthreads (the only CTA-wide barrier).
//   warpgroup 0, thread 0 (producer): per stage 1 TMA for A (128 rows × 64 K) and N / 64 for B
//               (64 K × 64 N each); rows past the expert are loaded (next expert's rows, or zeros
//               past m_cap) and masked in the epilogue; K and N tails are zero-filled by TMA.
//   warpgroup 0, warps 1-3, and warpgroup 3 if any (epilogue warps): drain each finished tile
//               from the tile buffer: plain store or the FC2 dGLU epilogue (dgrad_epilogue.cuh).
//   warpgroups 1, 2 (consumers): wgmma m64nNk16 (A K-major, B MN-major) into N / 2 fp32
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

// S: the shape (config.h DgradShape): DgradStoreShape, DgluWideShape or DgluNarrowShape.
template <class S>
__global__ void __launch_bounds__(S::kThreads, 1)
    dgrad_kernel(const __grid_constant__ CUtensorMap tmap_a,
                 const __grid_constant__ CUtensorMap tmap_b, const DgradProblem p,
                 const DGluEpilogue ep) {
  using G = typename S::G;
  extern __shared__ uint8_t smem_raw[];
  const StagedLayout<G> smem = StagedLayout<G>::carve(smem_raw);
  const TileShape shape{.block_m = kBlockM, .block_n = G::kN, .group_m = kGroupM,
                        .n_blocks = ceil_div(p.n, G::kN)};
  if (threadIdx.x < 32) warp_tile_starts(p.offsets, p.num_experts, shape, smem.tile_start);
  if (threadIdx.x == 0) smem.init_barriers(1, S::kEpilogueWarps * 32);
  __syncthreads();
  const int total_tiles = smem.tile_start[p.num_experts];
  const int k_blocks = ceil_div(p.k, G::kBlockK);
  const int warpgroup = threadIdx.x / kWarpgroupThreads;

  if (warpgroup == 0 || warpgroup > kConsumerWarpgroups) {
    if constexpr (S::kMovesRegisters) cutlass::arch::warpgroup_reg_dealloc<kProducerRegs>();
    if (threadIdx.x >= 32) {
      if constexpr (S::kGlu) dglu_epilogue_warps<S>(p, ep, smem, shape, total_tiles);
      else dgrad_store_epilogue_warps(p, smem, shape, total_tiles);
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
        tma_mn_major_3d<G>(&tmap_b, full, smem.b_stage(pipe.stage), G::kN / kMnChunk,
                           c.n_block * G::kN, kb * G::kBlockK, c.expert);
        pipe.advance();
      }
    }
    return;
  }

  if constexpr (S::kMovesRegisters) cutlass::arch::warpgroup_reg_alloc<kConsumerRegs>();
  const int slab = warpgroup - 1;
  TileHandoff handoff = TileHandoff::of(smem);
  float acc[G::kN / 2];
  PipelineState<G::kStages> pipe;
  for (int t = blockIdx.x; t < total_tiles; t += gridDim.x) {
    consume_tile<Major::K, Major::MN, G>(acc, k_blocks, smem, pipe, slab, [](int, int) {});
    if constexpr (S::kGlu) send_part<__nv_bfloat16, 0, S::kTilePitch>(acc, handoff, slab);
    else hand_off_tile(acc, handoff, slab, p.d_fp32);
  }
}

}  // namespace moefuse::gemm::bwd
