// Instantiation: wgrad, both operands by TMA.
#include "cuda/gemm/backward/launch_wgrad.cuh"

namespace moefuse::gemm::bwd {

void launch_wgrad(const WgradLaunch& launch, cudaStream_t stream) {
  launch_wgrad_kernel<false>(launch, stream);
}

}  // namespace moefuse::gemm::bwd
