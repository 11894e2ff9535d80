// Rounding and decoding shared by the small IEEE-like formats (E4M3, E5M2, E2M1): `kMan` mantissa
// bits, exponent bias `kBias`, exponent field 0 holding the subnormals. Integer arithmetic only,
// so the result never depends on the FPU's rounding mode or flush-to-zero setting.
#pragma once

#include <cstdint>

#include "formats/bits.h"

namespace moefuse::formats::detail {

// v / 2^s rounded to the nearest integer, ties to even; v < 2^24, s >= 1.
MOEFUSE_HD uint32_t shift_round_even(uint32_t v, int s) {
  if (s > 24) return 0;  // v < 2^24 <= half of 2^s: below the halfway point
  const uint32_t q = v >> s;
  const uint32_t rem = v & ((1u << s) - 1u);
  const uint32_t half = 1u << (s - 1);
  return q + ((rem > half || (rem == half && (q & 1u))) ? 1u : 0u);
}

// The magnitude code (sign excluded) nearest to the finite fp32 magnitude with bits `abs_bits`,
// ties to even. No overflow handling: the result may exceed the largest code of the format, and
// the caller saturates. Rounding of the normal range works on the whole (exponent, mantissa)
// field, so a mantissa carry moves into the exponent as it should.
template <int kMan, int kBias>
MOEFUSE_HD uint32_t round_magnitude(uint32_t abs_bits) {
  constexpr int kDropped = 23 - kMan;  // fp32 mantissa bits that do not fit
  constexpr int kEmin = 1 - kBias;     // exponent of the smallest normal
  const int fp32_exp = static_cast<int>(abs_bits >> 23);
  // fp32 subnormals (< 2^-126) lie far below half the smallest subnormal of every target format.
  if (fp32_exp == 0) return 0;
  const int e = fp32_exp - 127;
  if (e >= kEmin) return shift_round_even(abs_bits - (static_cast<uint32_t>(127 - kBias) << 23), kDropped);
  // Target subnormal: count units of 2^(kEmin - kMan) in significand * 2^(e - 23).
  const uint32_t significand = (abs_bits & 0x7FFFFFu) | 0x800000u;
  return shift_round_even(significand, kDropped + (kEmin - e));
}

// The value of a magnitude code (no special codes: the caller handles NaN and Inf first).
template <int kMan, int kBias>
MOEFUSE_HD float decode_magnitude(uint32_t code) {
  const uint32_t exp_field = code >> kMan;
  const uint32_t man = code & ((1u << kMan) - 1u);
  if (exp_field == 0) return static_cast<float>(man) * pow2(1 - kBias - kMan);  // exact
  return bits_float(((exp_field - kBias + 127u) << 23) | (man << (23 - kMan)));
}

}  // namespace moefuse::formats::detail
