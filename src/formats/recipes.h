// The per-group arithmetic of the three quantisation recipes, shared by the CPU reference
// (src/ref/quant.cpp) and the GPU kernels (src/cuda/quant/), so the two agree bit for bit.
// Only fp32 operations with one IEEE rounding each (multiply, divide, min) appear, none that a
// compiler could contract into an FMA, so host and device evaluate them identically.
// docs/formats.md explains each choice.
#pragma once

#include <cstdint>

#include "formats/bits.h"
#include "formats/fp4.h"
#include "formats/fp8.h"
#include "formats/ue8m0.h"

namespace moefuse::formats {

inline constexpr int kBlockwiseGroup = 128;  // 1x128 activation groups, 128x128 weight blocks
inline constexpr int kMxBlock = 32;
inline constexpr int kNvfp4Block = 16;

// amax as the bits of |x|, so that it is an integer max (exact, order-free, cheap on the GPU):
// non-negative floats order like their bit patterns. NaN contributes nothing (0), like fmaxf.
MOEFUSE_HD uint32_t amax_bits(float x) {
  const uint32_t a = float_bits(x) & kF32AbsMask;
  return a > kF32Inf ? 0u : a;
}
MOEFUSE_HD uint32_t max_bits(uint32_t a, uint32_t b) { return a > b ? a : b; }

// ---- Blockwise FP8 (DeepSeek-V3 / DeepGEMM): x ~ e4m3(x * multiplier) * scale.
struct BlockwiseScale {
  float scale;       // stored, fp32: amax / 448
  float multiplier;  // applied before the E4M3 rounding: 448 / amax
};

// An all-zero (or all-NaN) group gets scale 1 and multiplier 1: its values encode as zeros that
// dequantise exactly, and nothing divides by zero. The multiplier is capped at FLT_MAX so a group
// whose amax is tiny (448 / amax overflowing) never turns 0 * Inf into NaN.
MOEFUSE_HD BlockwiseScale blockwise_scale(float amax) {
  if (amax == 0.0f) return {.scale = 1.0f, .multiplier = 1.0f};
  const float m = kE4M3Max / amax;
  return {.scale = amax / kE4M3Max, .multiplier = m < kF32Max ? m : kF32Max};
}

// ---- MXFP8: E4M3 values, one UE8M0 scale per 32 elements.
// Shared exponent rounded up (Transformer Engine's variant, not OCP's floor(log2 amax) - 8) so
// the largest element never saturates: scale = 2^ceil(log2(amax / 448)).
MOEFUSE_HD uint8_t mx_scale_code(float amax) { return ue8m0_ceil(amax / kE4M3Max); }

// ---- NVFP4: E2M1 values, one E4M3 scale per 16 elements, one fp32 scale per tensor
// (Transformer Engine's definition): x ~ e2m1 * e4m3_block_scale * tensor_scale.
// Encode scale of the tensor: 448 * 6 / amax, capped at FLT_MAX; 1 when amax is 0, Inf, NaN or
// negative (no max |x| is; a caller-given amax can be, and must not silently scale x to ~0).
MOEFUSE_HD float nvfp4_tensor_encode_scale(float amax) {
  const float s = (kE4M3Max * kE2M1Max) / amax;
  if (amax == 0.0f || !(s > 0.0f)) return 1.0f;
  return s < kF32Max ? s : kF32Max;
}

// The stored tensor (decode) scale: 1 / encode scale.
MOEFUSE_HD float nvfp4_tensor_scale(float encode_scale) { return 1.0f / encode_scale; }

// What a block amax is multiplied by before its E4M3 rounding: encode_scale / 6.
MOEFUSE_HD float nvfp4_block_encode(float encode_scale) {
  return encode_scale * (1.0f / kE2M1Max);
}

// E4M3 block scale: e4m3(block_amax * (encode_scale / 6)), satfinite.
MOEFUSE_HD uint8_t nvfp4_block_scale_code(float block_amax, float encode_scale) {
  return e4m3_from_float(block_amax * nvfp4_block_encode(encode_scale));
}

// What x is multiplied by before the E2M1 rounding: 1 / (block scale * tensor scale), capped at
// FLT_MAX (a zero block scale, from an all-zero or underflowing block, gives FLT_MAX).
MOEFUSE_HD float nvfp4_value_multiplier(uint8_t block_code, float tensor_scale) {
  const float m = 1.0f / (e4m3_to_float(block_code) * tensor_scale);
  return m < kF32Max ? m : kF32Max;
}

// Dequantised value: (e2m1 * block scale) * tensor scale, in that order.
MOEFUSE_HD float nvfp4_dequant(uint8_t value_code, uint8_t block_code, float tensor_scale) {
  return e2m1_to_float(value_code) * e4m3_to_float(block_code) * tensor_scale;
}

}  // namespace moefuse::formats
