// The fused kernel's host launcher (a template; each launch_*.cu instantiates one variant).
#pragma once

#include "cuda/check.h"
#include "cuda/gemm/cluster_launch.h"
#include "cuda/gemm/common/tensor_map.h"
#include "cuda/gemm/kernel.cuh"
#include "cuda/gemm/launch.h"

namespace moefuse::gemm {

template <class OutT, bool kGather, int kCluster, int kN = kBlockN>
void launch_grouped_gemm(const GemmLaunch& launch, cudaStream_t stream) {
  const GemmProblem& p = launch.problem;
  if (p.m_cap == 0) return;  // nothing can be written
  // The A map is unused by the gather variant but still a valid descriptor (over B's memory) so
  // that the kernel signature stays one. Boxes of 1 / kCluster of a tile's rows (mainloop.cuh).
  const CUtensorMap tmap_a =
      kGather ? make_tma_2d(kTmaBf16, launch.b, int64_t{p.num_experts} * p.n, p.k, kBlockM, kBlockK)
              : make_tma_2d(kTmaBf16, launch.a, p.m_cap, p.k, kBlockM / kCluster, kBlockK);
  const CUtensorMap tmap_b =
      make_tma_3d(kTmaBf16, launch.b, p.num_experts, p.n, p.k, kN / kCluster, kBlockK);

  // The host cannot know the tile count; this bound (each expert adds at most one partial
  // m-block) only trims the grid for tiny problems.
  const int64_t max_tiles = (int64_t{ceil_div(p.m_cap, kBlockM)} + p.num_experts) *
                            ceil_div(p.n, kN);
  const int64_t units =
      kCluster == 1 ? max_tiles : max_units<kCluster>(max_tiles, p.num_experts);
  const int64_t smem_bytes = TileConfig<kN>::smem_bytes(p.num_experts);
  auto* kernel = &grouped_gemm_kernel<OutT, kGather, kCluster, kN>;
  MOEFUSE_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                          static_cast<int>(smem_bytes)));
  launch_persistent<kCluster>(kernel, units, launch.max_ctas, kThreads, smem_bytes, stream,
                              "the grouped GEMM", tmap_a, tmap_b, p, launch.epilogue);
}

}  // namespace moefuse::gemm
