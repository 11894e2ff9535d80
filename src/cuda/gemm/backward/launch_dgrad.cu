// Host launcher of the dgrad kernel: TMA maps from pointers and shapes only, persistent grid; a
// dGLU shape when the FC2 epilogue is on, by K (config.h dglu_block_n).
#include <algorithm>

#include "cuda/check.h"
#include "cuda/gemm/backward/dgrad_kernel.cuh"
#include "cuda/gemm/backward/launch.h"
#include "cuda/gemm/common/tensor_map.h"
#include "cuda/sm_count.h"

namespace moefuse::gemm::bwd {
namespace {

template <class S>
void launch_shape(const DgradLaunch& launch, cudaStream_t stream) {
  using G = typename S::G;
  const DgradProblem& p = launch.problem;
  const CUtensorMap tmap_a = make_tma_2d(kTmaBf16, launch.a, p.m_cap, p.k, kBlockM, G::kBlockK);
  // B [E, K, N]: boxes of 64 K rows × 64 N columns (MN-major operand).
  const CUtensorMap tmap_b =
      make_tma_3d(kTmaBf16, launch.b, p.num_experts, p.k, p.n, G::kBlockK, kMnChunk);
  // The host cannot know the tile count; this bound (each expert adds at most one partial
  // m-block) only trims the grid for tiny problems.
  const int64_t max_tiles =
      (int64_t{ceil_div(p.m_cap, kBlockM)} + p.num_experts) * ceil_div(p.n, G::kN);
  const int sms = cuda::device_sm_count();
  const int ctas = launch.max_ctas > 0 ? std::min(launch.max_ctas, sms) : sms;
  const int grid = static_cast<int>(std::min<int64_t>(ctas, max_tiles));
  const int64_t bytes = G::smem_bytes(p.num_experts);
  MOEFUSE_CUDA_CHECK(cudaFuncSetAttribute(&dgrad_kernel<S>,
                                          cudaFuncAttributeMaxDynamicSharedMemorySize,
                                          static_cast<int>(bytes)));
  dgrad_kernel<S><<<grid, S::kThreads, bytes, stream>>>(tmap_a, tmap_b, p, launch.dglu);
  MOEFUSE_CUDA_CHECK_LAUNCH();
}

}  // namespace

void launch_dgrad(const DgradLaunch& launch, cudaStream_t stream) {
  if (launch.problem.m_cap == 0) return;  // nothing can be written
  if (!launch.dglu.pre) launch_shape<DgradStoreShape>(launch, stream);
  else if (dglu_block_n(launch.problem.k) == kGluBlockN)
    launch_shape<DgluNarrowShape>(launch, stream);
  else
    launch_shape<DgluWideShape>(launch, stream);
}

}  // namespace moefuse::gemm::bwd
