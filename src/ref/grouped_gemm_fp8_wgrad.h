// CPU reference of the column-wise grouped FP8 quantiser and the FP8 k-grouped wgrad
// (moefuse/grouped_gemm_fp8_wgrad.h): the same arguments as host tensors.
//
// Quantiser: the group starts by a plain running sum over the experts (not the kernels' shared
// scheduler code, so that the reference checks it), then each group's amax and values with the
// 1x128 recipe of src/formats/recipes.h; padding columns get 0x00. Bit-exact with the GPU.
//
// wgrad: for each expert e and output element (i, j), in fp64 from the dequantised operands,
//   D[e][i, j] = Σ over the real rows of e (padding columns skipped) deq(at)[i, c] · deq(bt)[j, c]
// rounded once to fp32 (added to the old D[e] in fp64 with accumulate). Experts with no rows: 0,
// or untouched with accumulate.
#pragma once

#include "moefuse/grouped_gemm_fp8_wgrad.h"

namespace moefuse::ref {

// x [M_cap, N] fp32 (the GPU takes bf16: pass its exact fp32 widening). Validates as
// validate_quantize_fp8_colwise_grouped on kCpu plus the offsets' values (non-decreasing,
// within [0, M_cap]).
void quantize_fp8_colwise_grouped(const TensorView& x, const TensorView& offsets,
                                  const TensorView& xt, const TensorView& scales);

// Validates as validate_grouped_gemm_fp8_wgrad on kCpu plus the offsets' values (non-decreasing,
// their groups within the operands' capacity).
void grouped_gemm_fp8_wgrad(const GroupedGemmFp8WgradArgs& args);

}  // namespace moefuse::ref
