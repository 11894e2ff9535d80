// CPU reference of the FC2 dgrad's epilogue (moefuse/grouped_gemm_backward.h), given the GEMM's
// output g: what the dGLU epilogue warps of the BF16 and FP8 kernels write. Shared by the FP8
// dgrad reference (g from the fp64 FP8 GEMM) and the MXFP8 layer reference (g from fp64 sums of
// the quantise-dequantised operands).
#pragma once

#include "moefuse/grouped_gemm_backward.h"

namespace moefuse::ref {

// g [M, F] holds bf16 values (the kernels hand g to the dGLU rounded to bf16). In fp64 with the
// reference activation of expert_mlp.h (pre de-interleaved to [gate; up]), for the rows of each
// expert: d_pre = activation_backward(pre, p·g) (re-interleaved), scaled_act = p·act,
// dp = ⟨g, act⟩ + ⟨dys, b2[e]⟩, each rounded once to its dtype. Read: offsets, pre, row_scale
// (absent: p = 1), b2 and with it dys (bf16, only for dp's bias term); w2 is not read. Written:
// d_pre, and scaled_act and d_row_scale when present. Rows outside [offsets[0], offsets[E]) are
// not written. Host tensors; the callers validate them.
void fc2_dgrad_epilogue(const Fc2DgradArgs& args, const float* g);

}  // namespace moefuse::ref
