// One MXFP8 block's scale on the GPU, and the bf16 halves of a 4-byte word: shared by the passes
// that quantise bf16 in 32-element blocks without the row kernels' vectors (qdq_mxfp8.cu,
// mxfp8_cols.cu). The arithmetic is src/formats/recipes.h's, so the codes are the reference's.
#pragma once

#include <cstdint>

#include "formats/bits.h"
#include "formats/recipes.h"
#include "formats/ue8m0.h"

namespace moefuse::cuda::quant {

// A block's UE8M0 scale code, what x is multiplied by before the E4M3 rounding (exactly
// 1 / scale), and the scale itself.
struct MxScale {
  uint8_t code;
  float multiplier, scale;
};

__device__ __forceinline__ MxScale mx_scale(float amax) {
  const uint8_t code = formats::mx_scale_code(amax);
  return {code, formats::ue8m0_reciprocal(code), formats::ue8m0_to_float(code)};
}

// The bf16 in the low / high half of w, as fp32 (exact).
__device__ __forceinline__ float low_bf16(uint32_t w) { return formats::bits_float(w << 16); }
__device__ __forceinline__ float high_bf16(uint32_t w) {
  return formats::bits_float(w & 0xFFFF0000u);
}

}  // namespace moefuse::cuda::quant
