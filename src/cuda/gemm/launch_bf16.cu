// Instantiation: bf16 output, A by TMA.
#include "cuda/gemm/launch.cuh"

namespace moefuse::gemm {

void launch_grouped_gemm_bf16(const GemmLaunch& launch, cudaStream_t stream) {
  launch_grouped_gemm<__nv_bfloat16, false, kForwardCluster>(launch, stream);
}

}  // namespace moefuse::gemm
