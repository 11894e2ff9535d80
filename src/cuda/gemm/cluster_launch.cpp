#include "cuda/gemm/cluster_launch.h"

#include <string>

#include "cuda/sm_count.h"
#include "moefuse/error.h"

namespace moefuse::gemm {

int max_active_clusters(const void* kernel, int cluster_ctas, int threads, int64_t smem_bytes,
                        const char* what) {
  cudaLaunchAttribute cluster{};
  cluster.id = cudaLaunchAttributeClusterDimension;
  cluster.val.clusterDim = {.x = static_cast<unsigned>(cluster_ctas), .y = 1, .z = 1};
  cudaLaunchConfig_t config{};
  config.gridDim = dim3(cluster_ctas * cuda::device_sm_count());
  config.blockDim = dim3(threads);
  config.dynamicSmemBytes = static_cast<size_t>(smem_bytes);
  config.attrs = &cluster;
  config.numAttrs = 1;
  int clusters = 0;
  MOEFUSE_CUDA_CHECK(cudaOccupancyMaxActiveClusters(&clusters, kernel, &config));
  if (clusters < 1)
    throw NotSupported(std::string(what) + "'s " + std::to_string(cluster_ctas) +
                       "-CTA clusters cannot be resident on this GPU");
  return clusters;
}

}  // namespace moefuse::gemm
