// CPU reference of the FP8 grouped GEMM (moefuse/grouped_gemm_fp8.h): the same arguments, as host
// tensors, computed in fp64 from the dequantised operands, for either recipe (args.recipe).
//
// For every row r of expert e (offsets[e] <= r < offsets[e+1]):
//   h[n] = sum_k deq(a)[r, k] · deq(b)[e, n, k] (+ bias[e, n])          fp64
//   h'   = bf16(h) when D is bf16 or e4m3 and the epilogue is an activation, else h
//   D[r] = epilogue(h') · row_scale[r]                                  rounded to D's dtype
//          (e4m3 D: rounded to bf16, then quantised by quantize_fp8_blockwise_1x128, its scales
//          stored K-major in d_scales)
//   pre_activation[r] = bf16(h)                    (optional) h's order
// h' is the kernel's contract: with bf16 D and an activation its consumers hand h to the epilogue
// warps as bf16 (epilogues/staged_tile.cuh), so the activation reads exactly the saved
// pre-activation; the linear epilogue's consumers apply the row scale themselves and round once;
// the fp32 instantiation applies the activation to the fp32 h. The difference matters in the FP8
// layer, where act is quantised to E4M3 again: an act one bf16 step off flips E4M3 codes near
// their rounding points.
// with the activations of expert_mlp.h (activation_forward) applied to h in the reference
// [gate; up] order (the GLU columns of h are interleaved as glu_interleaved_row says, the
// reference undoes that). Rows outside [offsets[0], offsets[E]) are not written.
#pragma once

#include "moefuse/grouped_gemm_fp8.h"

namespace moefuse::ref {

// Validates as validate_grouped_gemm_fp8(args, Device::kCpu) plus the offsets' values
// (non-decreasing, within [0, M_cap]). Throws InvalidArgument.
void grouped_gemm_fp8(const GroupedGemmFp8Args& args);

}  // namespace moefuse::ref
