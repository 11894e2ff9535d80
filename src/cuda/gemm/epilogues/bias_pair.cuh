// The bias of a thread's accumulator column pair (columns col, col + 1 of h; the wgmma
// accumulator layout gives each thread adjacent column pairs): zeros without a bias or past N.
#pragma once

namespace moefuse::gemm {

__device__ __forceinline__ float2 bias_pair(const float* bias, int col, int n) {
  return bias && col < n ? __ldg(reinterpret_cast<const float2*>(bias + col)) : float2{0, 0};
}

}  // namespace moefuse::gemm
