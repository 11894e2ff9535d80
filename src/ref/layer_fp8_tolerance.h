// How far the FP8 forward's y may sit from the bf16 reference's, as a relative-norm error: the
// quantisation error of the recipe itself (x, W1, act and W2 each rounded to E4M3: 3 mantissa
// bits, ≈ 2^-4 / sqrt(3) relative RMS per value, partly averaging out in the dot products).
// Measured with ref::layer_forward_fp8 against ref::layer_forward on Gaussian data by
// tests/cpu/ref_layer_fp8_test.cpp (RefLayerFp8.QuantisationErrorIsWithinTheDocumentedBound
// prints it): 0.049-0.065 over seeds for the four presets' kinds (SwiGLU, clamped SwiGLU) at
// H 256, F 128 — about twice the 3e-2 first guessed, as four E4M3 roundings compound. The bound
// is that with margin (squared ReLU doubles act's relative error). Shared with the GPU test.
#pragma once

namespace moefuse::ref {

inline constexpr double kFp8LayerForwardTolerance = 1e-1;

}  // namespace moefuse::ref
