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
// codes (each map adds an even offset). About 12 instructions an element instead of ~30.
#pragma once

#include <cmath>
#include <cstdint>

#include "formats/bits.h"
#include "formats/host_device.h"

namespace moefuse::cuda::quant {

// The E2M1 code of y (sign in bit 3), bit-identical to formats::e2m1_from_float(y) unless y is a
// signalling NaN.
MOEFUSE_HD uint32_t e2m1_code_fast(float y) {
  // fminf first: fminf(NaN, 6) = 6, so NaN encodes as +6 with no sign; -0 stays -0.
  const float s = fmaxf(fminf(y, 6.0f), -6.0f);
  const float a = fabsf(s);
  const uint32_t half_steps = formats::float_bits(a + 0x1p22f) - formats::float_bits(0x1p22f);
  const uint32_t unit_steps = formats::float_bits(a + 0x1p23f) - (formats::float_bits(0x1p23f) - 2u);
  const uint32_t two_steps = formats::float_bits(a + 0x1p24f) - (formats::float_bits(0x1p24f) - 4u);
  const uint32_t low = half_steps < unit_steps ? half_steps : unit_steps;
  const uint32_t mag = low < two_steps ? low : two_steps;
  return mag | ((formats::float_bits(s) >> 28) & 0x8u);
}

}  // namespace moefuse::cuda::quant
