// UE8M0 scale codec (OCP MX v1.0 E8M0): an unsigned power of two 2^(c - 127), c in [0, 254];
// c = 255 is NaN. No zero, no sign.
#pragma once

#include <cstdint>

#include "formats/bits.h"

namespace moefuse::formats {

inline constexpr uint8_t kUE8M0NaN = 0xFF;
inline constexpr uint8_t kUE8M0MaxCode = 0xFE;  // 2^127

// 2^k, with k clamped to the representable [-127, 127].
MOEFUSE_HD uint8_t ue8m0_from_exponent(int k) {
  k = k < -127 ? -127 : (k > 127 ? 127 : k);
  return static_cast<uint8_t>(k + 127);
}

// The smallest representable power of two >= v (rounding toward +Inf, as PTX
// cvt.rp.satfinite.ue8m0x2): powers of two are exact, anything in between rounds up. v <= 2^-127
// (zeros included) gives 2^-127 (code 0); v > 2^127 and +Inf saturate to 2^127 (code 254); NaN
// and negative v, which have no code, give NaN (255).
MOEFUSE_HD uint8_t ue8m0_ceil(float v) {
  const uint32_t u = float_bits(v);
  if ((u & kF32AbsMask) == 0) return 0;
  if (u > kF32Inf) return kUE8M0NaN;  // NaN or negative
  if (u <= 0x00400000u) return 0;      // <= 2^-127
  if (u > 0x7F000000u) return kUE8M0MaxCode;  // > 2^127, +Inf
  const uint32_t exp = u >> 23;
  if (exp == 0) return 1;  // subnormal above 2^-127: 2^-126
  return static_cast<uint8_t>(exp + ((u & 0x7FFFFFu) != 0 ? 1u : 0u));
}

MOEFUSE_HD float ue8m0_to_float(uint8_t c) {
  if (c == kUE8M0NaN) return bits_float(0x7FC00000u);
  return pow2(static_cast<int>(c) - 127);
}

// 1 / ue8m0_to_float(c) exactly, for c in [0, 254]: 2^(127 - c) is always representable.
MOEFUSE_HD float ue8m0_reciprocal(uint8_t c) { return pow2(127 - static_cast<int>(c)); }

}  // namespace moefuse::formats
