// Host launch of the 2-CTA clustered persistent kernels (the FP8 GEMM, the bf16 dgrad): how many
// clusters can be resident at once (the persistent grid), and the launch with the cluster shape.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <utility>

#include "cuda/check.h"
#include "cuda/gemm/cluster_scheduler.h"

namespace moefuse::gemm {

// Clusters of `kernel` that can be resident at once (one CTA per SM, both CTAs of a cluster in
// one GPC). Throws NotSupported naming `what` if not even one can.
int max_active_clusters(const void* kernel, int threads, int64_t smem_bytes, const char* what);

// `clusters` clusters of kClusterSize CTAs of `threads` threads each.
template <class... Params, class... Args>
void launch_clusters(void (*kernel)(Params...), int clusters, int threads, int64_t smem_bytes,
                     cudaStream_t stream, Args&&... args) {
  cudaLaunchAttribute cluster{.id = cudaLaunchAttributeClusterDimension};
  cluster.val.clusterDim = {.x = kClusterSize, .y = 1, .z = 1};
  const cudaLaunchConfig_t config{.gridDim = dim3(kClusterSize * clusters),
                                  .blockDim = dim3(threads),
                                  .dynamicSmemBytes = static_cast<size_t>(smem_bytes),
                                  .stream = stream,
                                  .attrs = &cluster,
                                  .numAttrs = 1};
  MOEFUSE_CUDA_CHECK(cudaLaunchKernelEx(&config, kernel, std::forward<Args>(args)...));
}

}  // namespace moefuse::gemm
