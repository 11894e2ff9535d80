// How far the FP8 forward's y may sit from the bf16 reference's, as a relative-norm error: the
// quantisation error of the recipe itself (x, W1, act and W2 each rounded to E4M3: 3 mantissa
// bits, ≈ 2^-4 / sqrt(3) relative RMS per value, partly averaging out in the dot products).
// Measured with ref::layer_forward_fp8 against ref::layer_forward on Gaussian data by
// tests/cpu/ref_layer_fp8_test.cpp (RefLayerFp8.QuantisationErrorIsWithinTheDocumentedBound
// prints it): 0.049-0.065 over seeds for the four presets' kinds (SwiGLU, clamped SwiGLU) at
// H 256, F 128 — about twice the 3e-2 first guessed, as four E4M3 roundings compound. The bound
// is that with margin (squared ReLU doubles act's relative error). Shared with the GPU test.
#pragma once

#include <string_view>

namespace moefuse::ref {

inline constexpr double kFp8LayerForwardTolerance = 1e-1;

// The FP8 backward's gradients (ref::layer_backward_fp8, the GPU's FP8 backward) against the bf16
// reference's, rel-norm, by gradient name. Measured by tests/cpu/ref_layer_fp8_test.cpp
// (RefLayerFp8.BackwardQuantisationErrorIsWithinTheDocumentedBounds prints them) on Gaussian data
// at H 256, F 128, T 96, five seeds, the four presets' kinds:
//   dx 0.051-0.067   d_w1 0.058-0.063   d_w2 0.050-0.061   d_b1 0.051-0.053
//   d_w_router 0.043-0.079 (dp = <g, act> sums many quantised terms with cancellation; the
//   router's gradient is dp's, so it varies most)
// Each gradient passes through about four E4M3 roundings (dys or d_pre, a weight, and for the
// wgrads two column-wise operands, besides the FP8 pre recompute), hence ≈ the forward's error.
// The shared expert's weight gradients (deepseek's kind; the same recipe as one expert over all
// T rows, five seeds): d_shared_w1 0.063-0.065, d_shared_w2 0.063-0.065.
// The bounds: ~1.5x the worst measured. d_b2 = Σ p·dys never meets an FP8 operand: the bf16
// tolerance, as for names not listed.
inline double fp8_layer_gradient_tolerance(std::string_view grad) {
  if (grad == "dx" || grad == "d_w1" || grad == "d_w2" || grad == "d_b1" ||
      grad == "d_shared_w1" || grad == "d_shared_w2")
    return 1e-1;
  if (grad == "d_w_router") return 1.5e-1;
  return 2e-2;
}

// The MXFP8 recipe (ref/layer_mxfp8.h) against the bf16 reference, measured the same way by
// tests/cpu/ref_layer_mxfp8_test.cpp (RefLayerMxfp8.*QuantisationErrorIsWithinTheDocumented*):
// five seeds, the same six kinds: y 0.051-0.069, dx 0.053-0.069, d_w1 0.064-0.070, d_w2
// 0.056-0.069, d_b1 0.050-0.054, d_w_router 0.049-0.074 — the same E4M3 roundings as FP8 (a
// power-of-two scale maps a block's amax to [224, 448] instead of 448, a little coarser on
// average; the 32-blocks follow outliers closer), so the FP8 bounds hold with the same margin.
inline constexpr double kMxfp8LayerForwardTolerance = 1e-1;
inline double mxfp8_layer_gradient_tolerance(std::string_view grad) {
  return fp8_layer_gradient_tolerance(grad);
}

}  // namespace moefuse::ref
