// Instantiation: wgrad with B's rows gathered from token order (cp.async).
#include "cuda/gemm/backward/launch_wgrad.cuh"

namespace moefuse::gemm::bwd {

void launch_wgrad_gather(const WgradLaunch& launch, cudaStream_t stream) {
  launch_wgrad_kernel<true>(launch, stream);
}

}  // namespace moefuse::gemm::bwd
