// The unit every quantisation kernel moves: 16 consecutive elements per thread, read and written
// with 16-byte (or, for 16 FP4 codes, 8-byte) accesses. Callers guarantee the alignment
// (16-byte-aligned bases, rows a multiple of 16 elements; validate.h checks it).
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

#include "formats/bits.h"
#include "formats/recipes.h"

namespace moefuse::cuda::quant {

inline constexpr int kVec = 16;

__device__ __forceinline__ void load16(const float* p, float (&v)[kVec]) {
  const float4* p4 = reinterpret_cast<const float4*>(p);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float4 f = __ldg(p4 + i);
    v[4 * i] = f.x, v[4 * i + 1] = f.y, v[4 * i + 2] = f.z, v[4 * i + 3] = f.w;
  }
}

// bf16 -> fp32 is exact: the bf16 bits are the high half of the fp32 bits.
__device__ __forceinline__ void load16(const __nv_bfloat16* p, float (&v)[kVec]) {
  const uint4* p4 = reinterpret_cast<const uint4*>(p);
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const uint4 u = __ldg(p4 + i);
    const uint32_t w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      v[8 * i + 2 * j] = formats::bits_float(w[j] << 16);
      v[8 * i + 2 * j + 1] = formats::bits_float(w[j] & 0xFFFF0000u);
    }
  }
}

// 16 E4M3 codes of v * multiplier, one 16-byte store (element k in byte k).
__device__ __forceinline__ void store16_e4m3(uint8_t* q, const float (&v)[kVec], float multiplier) {
  uint32_t w[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    w[i] = 0;
#pragma unroll
    for (int k = 0; k < 4; ++k)
      w[i] |= uint32_t(formats::e4m3_from_float(v[4 * i + k] * multiplier)) << (8 * k);
  }
  *reinterpret_cast<uint4*>(q) = make_uint4(w[0], w[1], w[2], w[3]);
}

// 16 E2M1 codes of v * multiplier, one 8-byte store (element k in nibble k: low nibble first).
__device__ __forceinline__ void store16_e2m1(uint8_t* q, const float (&v)[kVec], float multiplier) {
  uint32_t w[2];
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    w[i] = 0;
#pragma unroll
    for (int k = 0; k < 8; ++k)
      w[i] |= uint32_t(formats::e2m1_from_float(v[8 * i + k] * multiplier)) << (4 * k);
  }
  *reinterpret_cast<uint2*>(q) = make_uint2(w[0], w[1]);
}

__device__ __forceinline__ void store16(float* out, const float (&v)[kVec]) {
  float4* o4 = reinterpret_cast<float4*>(out);
#pragma unroll
  for (int i = 0; i < 4; ++i) o4[i] = make_float4(v[4 * i], v[4 * i + 1], v[4 * i + 2], v[4 * i + 3]);
}

__device__ __forceinline__ uint32_t amax16(const float (&v)[kVec]) {
  uint32_t a = 0;
#pragma unroll
  for (int i = 0; i < kVec; ++i) a = formats::max_bits(a, formats::amax_bits(v[i]));
  return a;
}

// Max over aligned groups of `kLanes` consecutive lanes (a power of two <= 32); every lane of the
// warp must call it.
template <int kLanes>
__device__ __forceinline__ uint32_t group_max(uint32_t a) {
#pragma unroll
  for (int o = kLanes / 2; o >= 1; o /= 2) a = formats::max_bits(a, __shfl_xor_sync(0xFFFFFFFFu, a, o));
  return a;
}

}  // namespace moefuse::cuda::quant
