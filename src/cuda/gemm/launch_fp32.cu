// Instantiation: fp32 output, A by TMA.
#include "cuda/gemm/launch.cuh"

namespace moefuse::gemm {

void launch_grouped_gemm_fp32(const GemmLaunch& launch, cudaStream_t stream) {
  launch_grouped_gemm<float, false, 1>(launch, stream);
}

}  // namespace moefuse::gemm
