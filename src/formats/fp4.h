// FP4 E2M1 codec (OCP MX v1.0): sign, 2 exponent bits (bias 1), 1 mantissa bit; magnitudes
// 0, 0.5, 1, 1.5, 2, 3, 4, 6; no Inf, no NaN.
//
// Encoding rounds to nearest, ties to even, saturates finite overflow and +-Inf to +-6, and maps
// NaN to +6 (0x7): the format has no NaN and a loud maximum beats a silent zero. -0 -> 0x8.
// Storage packs two codes per byte, the element with the lower index in the low nibble.
#pragma once

#include <cstdint>

#include "formats/minifloat.h"

namespace moefuse::formats {

inline constexpr float kE2M1Max = 6.0f;
inline constexpr uint8_t kE2M1MaxCode = 0x7;

MOEFUSE_HD uint8_t e2m1_from_float(float x) {
  const uint32_t u = float_bits(x);
  const uint32_t abs_bits = u & kF32AbsMask;
  if (abs_bits > kF32Inf) return kE2M1MaxCode;
  const uint8_t sign = static_cast<uint8_t>((u >> 28) & 0x8u);
  uint32_t mag = abs_bits == kF32Inf ? kE2M1MaxCode : detail::round_magnitude<1, 1>(abs_bits);
  if (mag > kE2M1MaxCode) mag = kE2M1MaxCode;
  return static_cast<uint8_t>(sign | mag);
}

// The low nibble of `c` is decoded; the high nibble is ignored.
MOEFUSE_HD float e2m1_to_float(uint8_t c) {
  const float v = detail::decode_magnitude<1, 1>(c & 0x7u);
  return (c & 0x8u) ? -v : v;
}

// Two codes in one byte: `lo` is the element with the lower index.
MOEFUSE_HD uint8_t pack_e2m1x2(uint8_t lo, uint8_t hi) {
  return static_cast<uint8_t>((lo & 0xFu) | ((hi & 0xFu) << 4));
}

}  // namespace moefuse::formats
