// fp32 bit access and exact powers of two, identical on host and device.
#pragma once

#include <cstdint>
#if !defined(__CUDA_ARCH__)
#include <bit>
#endif

#include "formats/host_device.h"

namespace moefuse::formats {

MOEFUSE_HD uint32_t float_bits(float x) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(x);
#else
  return std::bit_cast<uint32_t>(x);
#endif
}

MOEFUSE_HD float bits_float(uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  return std::bit_cast<float>(u);
#endif
}

inline constexpr uint32_t kF32Inf = 0x7F800000u;      // bits of +Inf; larger magnitudes are NaN
inline constexpr uint32_t kF32AbsMask = 0x7FFFFFFFu;
inline constexpr float kF32Max = 3.40282347e+38f;

// 2^k exactly, for k in [-149, 127] (fp32 subnormals included). Callers keep k in range.
MOEFUSE_HD float pow2(int k) {
  return k >= -126 ? bits_float(static_cast<uint32_t>(k + 127) << 23)
                   : bits_float(1u << (k + 149));
}

}  // namespace moefuse::formats
