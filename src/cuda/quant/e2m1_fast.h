// A cheaper E2M1 encoder for the NVFP4 kernel (Hopper has no FP4 conversion instruction), equal to
// formats::e2m1_from_float for every fp32 input but signalling NaNs (which fminf may turn into a
// quiet NaN instead of ignoring; no arithmetic result is one: the kernel encodes products);
// tests/cpu/quant_fast_codec_test.cpp checks it over every sign, exponent and high mantissa
// pattern with the rounding-boundary low bits, and tests/gpu/quant_gpu_test.cu on the device.
//
// Why it is exact: after clamping to [-6, 6] (NaN -> +6, Inf -> +-6, as the reference saturates),
// the magnitude a is rounded on three uniform grids by one IEEE add each (a + 2^22 keeps multiples
// of 0.5, a + 2^23 of 1, a + 2^24 of 2, ties to even); the integer difference of the sum's bits is
// the count of grid steps. Mapped linearly onto codes (code = 2a on [0, 2], a + 2 on [2, 4],
// a / 2 + 4 on [4, 6]), each grid gives the right code inside its own binade and a larger one
// outside it, so the minimum of the three is the code. Ties to even in steps are ties to even in
// codes (each map adds an even offset). The offsets 2 and 4 ride in the magic numbers (2^23 + 2,
// 2^24 + 8: an even number of steps, so ties still go to even codes), which leaves two integer
// instructions (add-and-min) per element; the result keeps the 2^22 sum's exponent, whose low 23
// bits are zero, so callers mask it or cancel it (e2m1x8_bf16) instead of subtracting it.
#pragma once

#include <cmath>
#include <cstdint>

#include "formats/bits.h"
#include "formats/host_device.h"

namespace moefuse::cuda::quant {

// Bits of 2^22, 2^23, 2^24: what the three rounding sums carry above the step count.
inline constexpr uint32_t kE2m1HalfBase = 0x4A800000u;
inline constexpr uint32_t kE2m1UnitBase = 0x4B000000u;
inline constexpr uint32_t kE2m1TwoBase = 0x4B800000u;

// kE2m1HalfBase + the E2M1 magnitude code (0..7) of a, for a in [0, 6] (not NaN). Bits 3..22 of
// the result are zero.
MOEFUSE_HD uint32_t e2m1_mag_biased(float a) {
  const uint32_t half = formats::float_bits(a + 0x1p22f);                 // base + 2a
  const uint32_t unit = formats::float_bits(a + (0x1p23f + 2.0f));        // base + a + 2
  const uint32_t two = formats::float_bits(a + (0x1p24f + 8.0f));         // base + a / 2 + 4
  const uint32_t u = unit - (kE2m1UnitBase - kE2m1HalfBase);
  const uint32_t low = half < u ? half : u;
  const uint32_t t = two - (kE2m1TwoBase - kE2m1HalfBase);
  return low < t ? low : t;
}

// The E2M1 code of y (sign in bit 3), bit-identical to formats::e2m1_from_float(y) unless y is a
// signalling NaN.
MOEFUSE_HD uint32_t e2m1_code_fast(float y) {
  // fminf first: fminf(NaN, 6) = 6, so NaN encodes as +6 with no sign; -0 stays -0.
  const float s = fmaxf(fminf(y, 6.0f), -6.0f);
  return (e2m1_mag_biased(fabsf(s)) & 0x7u) | ((formats::float_bits(s) >> 28) & 0x8u);
}

// What adding kE2m1HalfBase << 4k for k = 0..7 leaves in a 32-bit word: e2m1x8_bf16 accumulates
// the biased magnitudes with one multiply-add each and starts from minus this.
inline constexpr uint32_t kE2m1x8Bias = [] {
  uint32_t g = 0;
  for (int k = 0; k < 8; ++k) g += kE2m1HalfBase << (4 * k);
  return g;
}();

// PRMT in its default mode: byte i of the result is byte (s >> 4i) & 7 of {b, a} (a is bytes
// 0..3), replicated from its top bit when bit 3 of the selector nibble is set.
MOEFUSE_HD uint32_t prmt(uint32_t a, uint32_t b, uint32_t s) {
#if defined(__CUDA_ARCH__)
  uint32_t r;
  asm("prmt.b32 %0, %1, %2, %3;" : "=r"(r) : "r"(a), "r"(b), "r"(s));
  return r;
#else
  const uint64_t ab = uint64_t(b) << 32 | a;
  uint32_t r = 0;
  for (int i = 0; i < 4; ++i) {
    const uint32_t n = (s >> (4 * i)) & 0xFu;
    uint32_t byte = uint32_t(ab >> (8 * (n & 7u))) & 0xFFu;
    if (n & 8u) byte = (byte & 0x80u) ? 0xFFu : 0u;
    r |= byte << (8 * i);
  }
  return r;
#endif
}

// w with each bf16 NaN replaced by +Inf (min with +Inf: the NaN operand is ignored), other
// values, -0 included, unchanged.
MOEFUSE_HD uint32_t bf16x2_nan_to_inf(uint32_t w) {
#if defined(__CUDA_ARCH__)
  uint32_t r;
  asm("min.bf16x2 %0, %1, %2;" : "=r"(r) : "r"(w), "r"(0x7F807F80u));
  return r;
#else
  uint32_t r = w;
  for (int i = 0; i < 2; ++i)
    if (((w >> (16 * i)) & 0x7FFFu) > 0x7F80u)
      r = (r & ~(0xFFFFu << (16 * i))) | 0x7F80u << (16 * i);
  return r;
#endif
}

// The 8 E2M1 codes of x * multiplier for the bf16 pairs w[0..3] (element k in nibble k, low
// nibble first), = formats::e2m1_from_float of each product, for a multiplier that is positive
// and not NaN (nvfp4_value_multiplier is in (0, FLT_MAX]). Then the product's sign is x's
// unless the product is NaN, which happens exactly when x is NaN; the signs are therefore taken
// from the bf16 words (NaN made +Inf, whose code has no sign), four byte permutes and two
// logic ops for 8 elements, instead of a shift and a mask each. The magnitude needs one min
// (a NaN product gives 6), and the codes are packed by multiply-adds (FMA pipe, not ALU).
MOEFUSE_HD uint32_t e2m1x8_bf16(const uint32_t (&w)[4], float multiplier) {
  uint32_t mags = 0u - kE2m1x8Bias;
#pragma unroll
  for (int k = 0; k < 8; ++k) {
    const uint32_t h = w[k / 2];
    const float x = formats::bits_float(k % 2 == 0 ? h << 16 : h & 0xFFFF0000u);
    const float a = fminf(fabsf(x * multiplier), 6.0f);
    mags += e2m1_mag_biased(a) * (1u << (4 * k));
  }
  // Sign bytes (0x00 or 0xFF) of elements 0, 2, 1, 3 and 4, 6, 5, 7, then even and odd ones.
  const uint32_t s01 = prmt(bf16x2_nan_to_inf(w[0]), bf16x2_nan_to_inf(w[1]), 0xFBD9u);
  const uint32_t s23 = prmt(bf16x2_nan_to_inf(w[2]), bf16x2_nan_to_inf(w[3]), 0xFBD9u);
  const uint32_t even = prmt(s01, s23, 0x5410u), odd = prmt(s01, s23, 0x7632u);
  const uint32_t signs = (even & 0x0F0F0F0Fu) | (odd & 0xF0F0F0F0u);
  return mags | (signs & 0x88888888u);
}

}  // namespace moefuse::cuda::quant
