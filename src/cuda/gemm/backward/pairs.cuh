// Two adjacent values as fp32 from / to bf16 or fp32 memory (4- or 8-byte accesses): the unit
// of the accumulator layout (a thread owns column pairs) and of the elementwise kernels; and the
// 16-byte fp32 add of the wgrad's accumulate.
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

// Four fp32 values packed in 16 bytes, added lane-wise (the wgrad's accumulate: old D + piece).
__device__ __forceinline__ uint4 add_f32x4(const uint4& a, const uint4& b) {
  const float4 x = *reinterpret_cast<const float4*>(&a), y = *reinterpret_cast<const float4*>(&b);
  const float4 s = make_float4(x.x + y.x, x.y + y.y, x.z + y.z, x.w + y.w);
  return *reinterpret_cast<const uint4*>(&s);
}

}  // namespace moefuse::gemm::bwd
