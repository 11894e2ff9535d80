// CPU references of the FP8 dgrad's pieces (moefuse/grouped_gemm_fp8_dgrad.h), on host tensors
// with the same arguments.
//
// transpose_fp8_blockwise_weights: the byte transpose of codes and scales (bit-exact target).
// fc2_dgrad_fp8: g = deq(dys)·deq(w2t)ᵀ by ref::grouped_gemm_fp8 (fp64 sums, stored fp32) and
// rounded to bf16 as the kernel hands it to its dGLU (the recipe's stored precision, as for pre),
// then ref::fc2_dgrad_epilogue (d_pre, scaled_act, dp; dp's bias term from dys_bf16).
#pragma once

#include "moefuse/grouped_gemm_fp8_dgrad.h"

namespace moefuse::ref {

void transpose_fp8_blockwise_weights(const TensorView& w, const TensorView& w_scales,
                                     const TensorView& wt, const TensorView& wt_scales);

// Validates as validate_fc2_dgrad_fp8(args, Device::kCpu) plus the offsets' values.
void fc2_dgrad_fp8(const Fc2DgradFp8Args& args);

}  // namespace moefuse::ref
