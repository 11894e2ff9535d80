// The dgrad kernel: D[r] = A[r] · B[e] for the rows r of expert e, ragged M from device offsets,
// A [m_cap, K] K-major (one 2D TMA map), B [E, K, N] used as stored, i.e. MN-major (one 3D TMA
// map, boxes of 64 N × 64 K, expert outer). Persistent, warp-specialised, 384 threads.
//
// Timeline of a CTA:
//   all:        warp 0 scans the tile counts (the forward's scheduler: experts in turn, m-blocks
//               in groups of 8) into shared memory; thread 0 initialises the mbarriers;
//               __syncthreads (the only CTA-wide barrier).
//   warpgroup 0 (producer, one thread): per stage 1 TMA for A (128 rows × 64 K) and 4 for B
//               (64 K × 4·64 N); rows past the expert are loaded (next expert's rows, or zeros
//               past m_cap) and masked in the epilogue; K and N tails are zero-filled by TMA.
//   warpgroups 1, 2 (consumers): wgmma m64n256k16 (A K-major, B MN-major) into 128 fp32
//               registers each, then the epilogue (plain store or the FC2 dGLU epilogue)
//               through the warpgroup's own staging buffer (staged_store.cuh).
#pragma once

#include <cuda.h>

#include <cutlass/arch/reg_reconfig.h>

#include "cuda/gemm/backward/dgrad_epilogue.cuh"
#include "cuda/gemm/backward/mainloop.cuh"
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
  const int k_blocks = ceil_div(p.k, kBlockK);
  const int warpgroup = threadIdx.x / kWarpgroupThreads;

  if (warpgroup == 0) {
    cutlass::arch::warpgroup_reg_dealloc<kProducerRegs>();
    if (threadIdx.x != 0) return;
    PipelineState pipe;
    for (int t = blockIdx.x; t < total_tiles; t += gridDim.x) {
      const TileCoord c = tile_coord(t, p.offsets, smem.tile_start, p.num_experts, shape);
      const int first_row = __ldg(p.offsets + c.expert) + c.m_block * kBlockM;
      for (int kb = 0; kb < k_blocks; ++kb) {
        ClusterBarrier::wait(&smem.empty[pipe.stage], pipe.phase ^ 1u);
        uint64_t* full = &smem.full[pipe.stage];
        ClusterTransactionBarrier::arrive_and_expect_tx(full, kABytes + kBBytes);
        cute::SM90_TMA_LOAD_2D::copy(&tmap_a, full, kCacheHintNormal, smem.a_stage(pipe.stage),
                                     kb * kBlockK, first_row);
        tma_mn_major_3d(&tmap_b, full, smem.b_stage(pipe.stage), kBlockN / kMnChunk,
                        c.n_block * kBlockN, kb * kBlockK, c.expert);
        pipe.advance();
      }
    }
    return;
  }

  cutlass::arch::warpgroup_reg_alloc<kConsumerRegs>();
  const int slab = warpgroup - 1;
  uint8_t* staging = smem.epilogue_stage(slab);
  float acc[128];
  PipelineState pipe;
  for (int t = blockIdx.x; t < total_tiles; t += gridDim.x) {
    const TileCoord c = tile_coord(t, p.offsets, smem.tile_start, p.num_experts, shape);
    const int row_first = __ldg(p.offsets + c.expert) + c.m_block * kBlockM + slab * (kBlockM / 2);
    const int row_end = min(__ldg(p.offsets + c.expert + 1), p.m_cap);
    consume_tile<Major::K, Major::MN>(acc, k_blocks, smem, pipe, slab, [](int, int) {});
    const int n0 = c.n_block * kBlockN;
    if (ep.pre) {
      dglu_tile(acc, p, ep, staging, slab, row_first, row_end, n0, c.n_block);
    } else if (p.d_fp32) {
      store_slab(acc, staging, slab, static_cast<float*>(p.d), p.n, p.n, row_first, row_end, n0);
    } else {
      store_slab(acc, staging, slab, static_cast<__nv_bfloat16*>(p.d), p.n, p.n, row_first,
                 row_end, n0);
    }
  }
}

}  // namespace moefuse::gemm::bwd
