// The grouped GEMM kernel: persistent (one CTA per SM), warp-specialised, 384 threads.
//
// Timeline of a CTA:
//   all:        warp 0 computes tile_start[] from the offsets; thread 0 initialises the
//               mbarriers; __syncthreads (the only CTA-wide barrier).
//   warpgroup 0 (producer, setmaxnreg down): walks tiles blockIdx.x, +gridDim.x, ... and fills
//               stages ahead of the consumers (mainloop.cuh has the protocol).
//   warpgroups 1, 2 (consumers, setmaxnreg up): for the same tiles, K loop of wgmma into 128
//               fp32 registers each (rows 0-63 and 64-127 of the tile), then the fused epilogue
//               from registers to global memory while the producer already loads the next tile.
#pragma once

#include <cuda.h>

#include <cutlass/arch/reg_reconfig.h>

#include "cuda/gemm/device_scheduler.cuh"
#include "cuda/gemm/epilogues/register_epilogue.cuh"
#include "cuda/gemm/mainloop.cuh"

namespace moefuse::gemm {

template <class OutT, bool kGather>
__global__ void __launch_bounds__(kThreads, 1)
    grouped_gemm_kernel(const __grid_constant__ CUtensorMap tmap_a,
                        const __grid_constant__ CUtensorMap tmap_b, const GemmProblem p,
                        const EpilogueParams ep) {
  extern __shared__ uint8_t smem_raw[];
  const SharedLayout smem = SharedLayout::carve(smem_raw);
  const TileShape shape{.block_m = kBlockM, .block_n = kBlockN, .group_m = kGroupM,
                        .n_blocks = ceil_div(p.n, kBlockN)};

  if (threadIdx.x < 32) warp_tile_starts(p.offsets, p.num_experts, shape, smem.tile_start);
  if (threadIdx.x == 0) {
    for (int s = 0; s < kStages; ++s) {
      ClusterBarrier::init(&smem.full[s], kGather ? 1 + kWarpgroupThreads : 1);
      ClusterBarrier::init(&smem.empty[s], kConsumerThreads);
    }
    cutlass::arch::fence_barrier_init();
  }
  __syncthreads();
  const int total_tiles = smem.tile_start[p.num_experts];
  const int warpgroup = threadIdx.x / kWarpgroupThreads;

  if (warpgroup == 0) {
    cutlass::arch::warpgroup_reg_dealloc<kGather ? kGatherProducerRegs : kProducerRegs>();
    if constexpr (kGather) {
      produce_gather(&tmap_b, p, smem, shape, total_tiles);
    } else if (threadIdx.x == 0) {
      produce_tma(&tmap_a, &tmap_b, p, smem, shape, total_tiles);
    }
  } else {
    cutlass::arch::warpgroup_reg_alloc<kGather ? kGatherConsumerRegs : kConsumerRegs>();
    const int slab = warpgroup - 1;
    float acc[128];
    PipelineState pipe;
    for (int t = blockIdx.x; t < total_tiles; t += gridDim.x) {
      const TileCoord c = tile_coord(t, p.offsets, smem.tile_start, p.num_experts, shape);
      const TileRows rows = tile_rows(p, c);
      consume_tile<kGather>(acc, p, smem, pipe, slab);
      epilogue_tile<OutT>(acc, p, ep, c.expert, rows.first + slab * (kBlockM / 2), rows.end,
                          c.n_block * kBlockN);
    }
  }
}

}  // namespace moefuse::gemm
