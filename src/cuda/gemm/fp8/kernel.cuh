// The FP8 grouped GEMM kernel (DeepSeek-V3 recipe): persistent (one CTA per SM),
// warp-specialised, 384 threads.
//
// Timeline of a CTA:
//   all:        warp 0 computes tile_start[] from the offsets; thread 0 initialises the
//               mbarriers; __syncthreads (the only CTA-wide barrier).
//   warpgroup 0 (setmaxnreg down): thread 0 produces, walking tiles blockIdx.x, +gridDim.x, ...
//               and filling stages ahead of the consumers (mainloop.cuh has the protocol).
//   warpgroups 1, 2 (consumers, setmaxnreg up): for the same tiles, the K loop with per-block
//               promotion into 64 fp32 registers each (rows 0-63 and 64-127 of the tile), then
//               the epilogue from registers: the forward's (epilogue.cuh) or, with kDGlu, the
//               FC2 dgrad's dGLU (dglu_epilogue.cuh), a compile-time choice.
#pragma once

#include <cuda.h>

#include <cutlass/arch/reg_reconfig.h>

#include "cuda/gemm/device_scheduler.cuh"
#include "cuda/gemm/fp8/dglu_epilogue.cuh"
#include "cuda/gemm/fp8/epilogue.cuh"
#include "cuda/gemm/fp8/mainloop.cuh"

namespace moefuse::gemm::fp8 {

// OutT: D's element type (forward epilogue; unused with kDGlu, which writes dglu's outputs).
template <class OutT, bool kDGlu>
__global__ void __launch_bounds__(kThreads, 1)
    grouped_gemm_fp8_kernel(const __grid_constant__ CUtensorMap tmap_a,
                            const __grid_constant__ CUtensorMap tmap_b,
                            const __grid_constant__ CUtensorMap tmap_scales,
                            const Fp8GemmProblem p, const EpilogueParams ep,
                            const bwd::DGluEpilogue dglu) {
  extern __shared__ uint8_t smem_raw[];
  const SharedLayout smem = SharedLayout::carve(smem_raw);
  const TileShape shape{.block_m = kBlockM, .block_n = kBlockN, .group_m = kGroupM,
                        .n_blocks = ceil_div(p.n, kBlockN)};

  if (threadIdx.x < 32) warp_tile_starts(p.offsets, p.num_experts, shape, smem.tile_start);
  if (threadIdx.x == 0) {
    init_stage_barriers<kStages>(smem.full, smem.empty, 1);
    cutlass::arch::fence_barrier_init();
  }
  __syncthreads();
  const int total_tiles = smem.tile_start[p.num_experts];
  const int warpgroup = threadIdx.x / kWarpgroupThreads;

  if (warpgroup == 0) {
    cutlass::arch::warpgroup_reg_dealloc<kProducerRegs>();
    if (threadIdx.x == 0) produce(&tmap_a, &tmap_b, &tmap_scales, p, smem, shape, total_tiles);
  } else {
    cutlass::arch::warpgroup_reg_alloc<kConsumerRegs>();
    const int slab = warpgroup - 1;
    const int n_groups = ceil_div(p.n, kBlockN), k_groups = ceil_div(p.k, kBlockK);
    float acc[kAccumulators];
    PipelineState<kStages> pipe;
    for (int t = blockIdx.x; t < total_tiles; t += gridDim.x) {
      const TileCoord c = tile_coord(t, p.offsets, smem.tile_start, p.num_experts, shape);
      const TileRows rows = tile_rows<kBlockM>(p, c);
      const float* b_scale =
          p.b_scales + (static_cast<int64_t>(c.expert) * n_groups + c.n_block) * k_groups;
      consume_tile(acc, p, smem, pipe, slab, b_scale);
      const int slab_first = rows.first + slab * (kBlockM / 2);
      if constexpr (kDGlu)
        dglu_tile(acc, p, dglu, slab_first, rows.end, c.n_block * kBlockN, c.n_block);
      else
        epilogue_tile<OutT>(acc, p, ep, c.expert, slab_first, rows.end, c.n_block * kBlockN);
    }
  }
}

}  // namespace moefuse::gemm::fp8
