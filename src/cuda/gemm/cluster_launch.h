// Host launch of the persistent kernels that run in clusters (the FP8 GEMM, the bf16 forward with
// bf16 output and the bf16 dGLU dgrad, all in pairs) or may run without (the plain dgrad, the
// other forward variants): how many clusters can be resident at once, and the launch with the
// cluster shape.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <utility>

#include "cuda/check.h"
#include "cuda/gemm/cluster_scheduler.h"
#include "cuda/sm_count.h"

namespace moefuse::gemm {

// Clusters of `cluster` CTAs of `kernel` that can be resident at once (one CTA per SM, the CTAs
// of a cluster in one GPC). Throws NotSupported naming `what` if not even one can.
int max_active_clusters(const void* kernel, int cluster, int threads, int64_t smem_bytes,
                        const char* what);

// `ctas` CTAs of `threads` threads each, in clusters of `cluster` CTAs (1: no cluster).
template <class... Params, class... Args>
void launch_ctas(void (*kernel)(Params...), int cluster, int ctas, int threads, int64_t smem_bytes,
                 cudaStream_t stream, Args&&... args) {
  cudaLaunchAttribute shape{};
  shape.id = cudaLaunchAttributeClusterDimension;
  shape.val.clusterDim.x = static_cast<unsigned>(cluster);
  shape.val.clusterDim.y = shape.val.clusterDim.z = 1;
  cudaLaunchConfig_t config{};
  config.gridDim = dim3(ctas);
  config.blockDim = dim3(threads);
  config.dynamicSmemBytes = static_cast<size_t>(smem_bytes);
  config.stream = stream;
  config.attrs = &shape;
  config.numAttrs = cluster > 1 ? 1 : 0;
  MOEFUSE_CUDA_CHECK(cudaLaunchKernelEx(&config, kernel, std::forward<Args>(args)...));
}

// The persistent grid of a kernel with `units` work units of kCluster CTAs each (1: plain CTAs, a
// unit a tile): one CTA per SM, or max_ctas (> 0) of them, in whole clusters and at least one;
// never more clusters than units. `what` names the kernel in the error if its clusters cannot be
// resident.
template <int kCluster, class... Params, class... Args>
void launch_persistent(void (*kernel)(Params...), int64_t units, int max_ctas, int threads,
                       int64_t smem_bytes, cudaStream_t stream, const char* what,
                       Args&&... args) {
  static_assert(kCluster == 1 || kCluster == 2 || kCluster == 4);
  int64_t clusters = kCluster == 1 ? cuda::device_sm_count()
                                   : max_active_clusters(reinterpret_cast<const void*>(kernel),
                                                         kCluster, threads, smem_bytes, what);
  if (max_ctas > 0) clusters = std::min<int64_t>(clusters, std::max(1, max_ctas / kCluster));
  clusters = std::min(clusters, units);
  launch_ctas(kernel, kCluster, static_cast<int>(clusters * kCluster), threads, smem_bytes, stream,
              std::forward<Args>(args)...);
}

}  // namespace moefuse::gemm
