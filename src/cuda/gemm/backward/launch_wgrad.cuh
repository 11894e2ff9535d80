// Host launcher template of the wgrad kernel (launch_wgrad.cu and launch_wgrad_gather.cu
// instantiate it): TMA maps from pointers and shapes only, persistent grid over a tile count
// known on the host.
#pragma once

#include <algorithm>

#include "cuda/check.h"
#include "cuda/gemm/backward/launch.h"
#include "cuda/gemm/backward/wgrad_kernel.cuh"
#include "cuda/gemm/common/tensor_map.h"
#include "cuda/sm_count.h"

namespace moefuse::gemm::bwd {

// The launch with stage ring and tile width G (config.h; wgrad_kernel.cuh says which).
template <bool kGather, class G>
void launch_wgrad_ring(const WgradLaunch& launch, cudaStream_t stream) {
  const WgradProblem& p = launch.problem;
  // Boxes of G::kBlockK K rows × 64 MN columns. The gather variant's B map is unused, and D's
  // map the TMA variant's: A's map stands in, so that the kernel signature stays one.
  const CUtensorMap tmap_a =
      make_tma_2d(kTmaBf16, launch.a, p.m_cap, p.m_out, G::kBlockK, kMnChunk);
  const CUtensorMap tmap_b =
      kGather ? tmap_a : make_tma_2d(kTmaBf16, launch.b, p.m_cap, p.n_out, G::kBlockK, kMnChunk);
  // The gather variant's D [E, m_out, n_out] in its consumers' sub-tiles: 64 rows × 128 bytes.
  const TmaElement d_element = p.d_fp32 ? kTmaF32 : kTmaBf16;
  const CUtensorMap tmap_d =
      kGather ? make_tma_3d(d_element, p.d, p.num_experts, p.m_out, p.n_out,
                            kBlockM / kConsumerWarpgroups, kSlabSubTileRowBytes / d_element.bytes)
              : tmap_a;
  const int64_t tiles = int64_t{p.num_experts} * ceil_div(p.m_out, kBlockM) *
                        ceil_div(p.n_out, G::kN);
  const int sms = cuda::device_sm_count();
  const int ctas = launch.max_ctas > 0 ? std::min(launch.max_ctas, sms) : sms;
  const int grid = static_cast<int>(std::min<int64_t>(ctas, tiles));
  const int64_t bytes = G::smem_bytes(kGather ? 0 : p.num_experts);  // + the expert order
  auto* kernel = &wgrad_kernel<kGather, G>;
  MOEFUSE_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                          static_cast<int>(bytes)));
  kernel<<<grid, kThreads, bytes, stream>>>(tmap_a, tmap_b, tmap_d, p);
  MOEFUSE_CUDA_CHECK_LAUNCH();
}

template <bool kGather>
void launch_wgrad_kernel(const WgradLaunch& launch, cudaStream_t stream) {
  const WgradProblem& p = launch.problem;
  if (p.m_cap == 0) {  // no rows at all: every expert is empty (and TMA maps need rows)
    if (!p.accumulate)
      MOEFUSE_CUDA_CHECK(cudaMemsetAsync(p.d, 0,
                                         int64_t{p.num_experts} * p.m_out * p.n_out *
                                             (p.d_fp32 ? 4 : 2),
                                         stream));
    return;
  }
  if constexpr (kGather) launch_wgrad_ring<true, GatherWgradStages>(launch, stream);
  else if (wgrad_narrow(p.n_out, p.d_fp32))
    launch_wgrad_ring<false, WgradNarrowStages>(launch, stream);
  else launch_wgrad_ring<false, WgradStages>(launch, stream);
}

}  // namespace moefuse::gemm::bwd
