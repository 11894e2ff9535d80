// Instantiation: bf16 output, A rows gathered by cp.async through the row → token index.
#include "cuda/gemm/launch.cuh"

namespace moefuse::gemm {

void launch_grouped_gemm_gather_bf16(const GemmLaunch& launch, cudaStream_t stream) {
  launch_grouped_gemm<__nv_bfloat16, true, 1>(launch, stream);
}

}  // namespace moefuse::gemm
