// CPU reference of the fused permute + blockwise FP8 quantisation (moefuse::permute_quantize_fp8,
// moefuse/dispatch.h): the permute reference, then the 1x128 quantiser reference, its scales
// transposed to the FP8 grouped GEMM's K-major layout. Nothing of its own is computed here, so
// the GPU kernel is checked against the very codes and scales the unfused path produces.
#pragma once

#include "moefuse/tensor.h"

namespace moefuse::ref {

// x [T, H] fp32 and token_of_row [R] int32 (-1: padding row) to xs_fp8 [R, H] e4m3 and xs_scales
// [ceil(H/128), fp8_scale_rows(R)] fp32, K-major. Padding rows are quantised zero rows (zero
// codes, scale 1); the scale columns [R, fp8_scale_rows(R)) are 1. Host views; InvalidArgument
// names a bad one.
void permute_quantize_fp8(const TensorView& x, const TensorView& token_of_row,
                          const TensorView& xs_fp8, const TensorView& xs_scales);

}  // namespace moefuse::ref
