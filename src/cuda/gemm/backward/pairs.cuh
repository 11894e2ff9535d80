// Two adjacent values as fp32 from / to bf16 or fp32 memory (4- or 8-byte accesses): the unit
// of the accumulator layout (a thread owns column pairs) and of the elementwise kernels.
#pragma once

#include <cuda_bf16.h>

namespace moefuse::gemm::bwd {

__device__ __forceinline__ void store_pair(__nv_bfloat16* dst, float v0, float v1) {
  *reinterpret_cast<__nv_bfloat162*>(dst) = __floats2bfloat162_rn(v0, v1);
}
__device__ __forceinline__ void store_pair(float* dst, float v0, float v1) {
  *reinterpret_cast<float2*>(dst) = make_float2(v0, v1);
}
__device__ __forceinline__ float2 load_pair(const __nv_bfloat16* src) {
  return __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(src));
}

}  // namespace moefuse::gemm::bwd
