// Host launcher of the dgrad kernel: TMA maps from pointers and shapes only, a persistent grid (of
// clusters for the dGLU shapes: config.h); a dGLU shape when the FC2 epilogue is on, by K
// (config.h dglu_block_n).
#include "cuda/check.h"
#include "cuda/gemm/backward/dgrad_kernel.cuh"
#include "cuda/gemm/backward/launch.h"
#include "cuda/gemm/cluster_launch.h"
#include "cuda/gemm/common/tensor_map.h"

namespace moefuse::gemm::bwd {
namespace {

template <class S>
void launch_shape(const DgradLaunch& launch, cudaStream_t stream) {
  using G = typename S::G;
  const DgradProblem& p = launch.problem;
  // A in one piece per CTA of a cluster: in an n-group each loads one (dgrad_kernel.cuh).
  const CUtensorMap tmap_a =
      make_tma_2d(kTmaBf16, launch.a, p.m_cap, p.k, kBlockM / S::kCluster, G::kBlockK);
  // B [E, K, N]: boxes of 64 K rows × 64 N columns (MN-major operand).
  const CUtensorMap tmap_b =
      make_tma_3d(kTmaBf16, launch.b, p.num_experts, p.k, p.n, G::kBlockK, kMnChunk);
  // The host cannot know the tile count; this bound (each expert adds at most one partial
  // m-block) only trims the grid for tiny problems.
  const int64_t max_tiles =
      (int64_t{ceil_div(p.m_cap, kBlockM)} + p.num_experts) * ceil_div(p.n, G::kN);
  const int64_t bytes = G::smem_bytes(p.num_experts);
  auto* kernel = &dgrad_kernel<S>;
  MOEFUSE_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                          static_cast<int>(bytes)));
  const int64_t units =
      S::kCluster == 1 ? max_tiles : max_units<S::kCluster>(max_tiles, p.num_experts);
  launch_persistent<S::kCluster>(kernel, units, launch.max_ctas, S::kThreads, bytes, stream,
                                 "the dGLU dgrad grouped GEMM", tmap_a, tmap_b, p, launch.dglu);
}

}  // namespace

void launch_dgrad(const DgradLaunch& launch, cudaStream_t stream) {
  if (launch.problem.m_cap == 0) return;  // nothing can be written
  const DgradProblem& p = launch.problem;
  if (!launch.dglu.pre && dgrad_narrow(p.n, p.d_fp32))
    launch_shape<DgradNarrowStoreShape>(launch, stream);
  else if (!launch.dglu.pre)
    launch_shape<DgradStoreShape>(launch, stream);
  else if (dglu_block_n(launch.problem.k) == kGluBlockN)
    launch_shape<DgluNarrowShape>(launch, stream);
  else
    launch_shape<DgluWideShape>(launch, stream);
}

}  // namespace moefuse::gemm::bwd
