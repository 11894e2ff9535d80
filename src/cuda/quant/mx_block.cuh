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

// A lane's 4 columns of one 32-row block (the column passes): w[r] holds row r's 4 bf16 (8 bytes
// at x + r·pitch; rows at or past `rows` are zeros, which no amax sees), s each column's scale.
// kReadOnly: loads through the read-only path (a pass that does not write x).
template <bool kReadOnly>
__device__ __forceinline__ void load_column_block(const uint2* x, int64_t pitch, int rows,
                                                  uint2 (&w)[formats::kMxBlock],
                                                  MxScale (&s)[4]) {
#pragma unroll
  for (int r = 0; r < formats::kMxBlock; ++r) {
    w[r] = uint2{};
    if (r < rows) {
      if constexpr (kReadOnly) w[r] = __ldg(x + r * pitch);
      else w[r] = x[r * pitch];
    }
  }
  float amax[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
  for (int r = 0; r < formats::kMxBlock; ++r) {
    amax[0] = fmaxf(amax[0], fabsf(low_bf16(w[r].x)));
    amax[1] = fmaxf(amax[1], fabsf(high_bf16(w[r].x)));
    amax[2] = fmaxf(amax[2], fabsf(low_bf16(w[r].y)));
    amax[3] = fmaxf(amax[3], fabsf(high_bf16(w[r].y)));
  }
#pragma unroll
  for (int j = 0; j < 4; ++j) s[j] = mx_scale(amax[j]);
}

}  // namespace moefuse::cuda::quant
