// FP8 codecs, OCP 8-bit floating point (v1.0): E4M3 ("fn": bias 7, no Inf, S.1111.111 is NaN,
// max 448) and E5M2 (bias 15, IEEE-like Inf and NaN, max 57344).
//
// Encoding from fp32 rounds to nearest, ties to even, and saturates ("satfinite", as PTX
// cvt.rn.satfinite): every finite value beyond the largest normal and every infinity becomes
// +-max; NaN becomes the canonical NaN 0x7F (sign dropped). -0 keeps its sign (0x80).
// Subnormals are exact in both directions. docs/formats.md has the full definition.
#pragma once

#include <cstdint>

#include "formats/minifloat.h"

namespace moefuse::formats {

inline constexpr float kE4M3Max = 448.0f;
inline constexpr float kE5M2Max = 57344.0f;
inline constexpr uint8_t kE4M3MaxCode = 0x7E;
inline constexpr uint8_t kE5M2MaxCode = 0x7B;
inline constexpr uint8_t kFp8CanonicalNaN = 0x7F;

namespace detail {
template <int kMan, int kBias, uint8_t kMaxCode>
MOEFUSE_HD uint8_t encode_fp8_satfinite(float x) {
  const uint32_t u = float_bits(x);
  const uint32_t abs_bits = u & kF32AbsMask;
  if (abs_bits > kF32Inf) return kFp8CanonicalNaN;
  const uint8_t sign = static_cast<uint8_t>((u >> 24) & 0x80u);
  uint32_t mag = abs_bits == kF32Inf ? kMaxCode : round_magnitude<kMan, kBias>(abs_bits);
  if (mag > kMaxCode) mag = kMaxCode;
  return static_cast<uint8_t>(sign | mag);
}

MOEFUSE_HD float negate_if(bool negative, float v) { return negative ? -v : v; }
}  // namespace detail

MOEFUSE_HD uint8_t e4m3_from_float(float x) {
  return detail::encode_fp8_satfinite<3, 7, kE4M3MaxCode>(x);
}

MOEFUSE_HD uint8_t e5m2_from_float(float x) {
  return detail::encode_fp8_satfinite<2, 15, kE5M2MaxCode>(x);
}

MOEFUSE_HD float e4m3_to_float(uint8_t c) {
  if ((c & 0x7Fu) == 0x7Fu) return bits_float(0x7FC00000u);
  return detail::negate_if(c & 0x80u, detail::decode_magnitude<3, 7>(c & 0x7Fu));
}

MOEFUSE_HD float e5m2_to_float(uint8_t c) {
  const uint32_t mag = c & 0x7Fu;
  if (mag > 0x7Cu) return bits_float(0x7FC00000u);
  const float v = mag == 0x7Cu ? bits_float(kF32Inf) : detail::decode_magnitude<2, 15>(mag);
  return detail::negate_if(c & 0x80u, v);
}

}  // namespace moefuse::formats
