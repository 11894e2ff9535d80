// One MoE layer step on the host, shared by the layer GPU tests (gpu/layer_test_fixture.h) and
// the fuzz harness (tools/fuzz): the inputs in the reference layout, the CPU reference step
// (ref::layer_forward + backward) and the comparison of every output and gradient with the
// layer tests' tolerances. No CUDA call.
//
// The router sees x and w_router drawn from small dyadic grids (x = i/8, w = j/64 with |i|,|j|
// <= 16): every product is a multiple of 2^-9 and every partial sum stays below 2^24·2^-9, so
// the GPU's fp32 logits equal the reference's fp64 logits exactly and both pick the same experts
// (near-ties would otherwise move a whole row). Everything else is Gaussian.
#pragma once

#include <cstdint>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "moefuse/config.h"
#include "moefuse/tensor.h"
#include "ref/layer.h"

namespace moefuse::test {

// n values on the grid {i / scale : |i| <= 16} (exact in bf16), from `gen`.
std::vector<float> dyadic(std::mt19937_64& gen, size_t n, float scale);

// One layer's inputs in the reference layout ([gate; up] GLU rows), fp32 holding bf16 values
// wherever the GPU reads bf16.
struct LayerData {
  MoeConfig c;
  int64_t T = 0;
  std::vector<float> x, w_router, score_bias, w1, b1, w2, b2, sw1, sw2, dy;

  // Everything fresh from the test's generator (rng()).
  static LayerData random(const MoeConfig& c, int64_t T);
  // The router's inputs (x, w_router, score_bias) from `gen`; the rest left empty.
  static LayerData random_router_inputs(const MoeConfig& c, int64_t T, std::mt19937_64& gen);
  // The experts' weights and biases, the shared expert's and dy from `gen`.
  void draw_expert_inputs(std::mt19937_64& gen);
};

// Named results of one layer step, host fp32, in the reference layout.
struct StepResult {
  std::vector<std::pair<std::string, std::vector<float>>> tensors;
  // The reference's only (empty in a GPU result): how far rounding the terms of d_probs moves
  // d_w_router [E, H], per unit of relative error of a term (layer_step.cpp says how).
  std::vector<float> d_w_router_error_scale;

  const std::vector<float>& at(const std::string& name) const;
};

// The reference backward reference_step runs: ref::layer_backward, or the FP8 recipe's
// ref::layer_backward_fp8 (same signature).
using ReferenceBackward = void (*)(const MoeConfig&, const ref::LayerWeights&, const TensorView&,
                                   const ref::LayerForward&, const TensorView&,
                                   const ref::LayerGrads&);

StepResult reference_step(const LayerData& d, ReferenceBackward backward = &ref::layer_backward);

// Relative-norm tolerances. Every tensor on the expert path passes through two or three bf16
// roundings (pre/act, ys or d_pre, the bf16 output), each ≈ 2^-9 relative; the router gradient
// runs its GEMMs on bf16 d_logits. 2e-2 is about 4× the expected error. The losses are fp32
// reductions of exact logits: 1e-4.
// d_w_router gets more where d_probs cancels (step_mismatches): each d_probs entry is a sum of F
// rounded terms, and where they, or two experts' entries in the router's centring, cancel, the
// rounding error stays while d_w_router shrinks (fuzz case 147: 2.3% at T = 1).
double tolerance(const std::string& name);

// The relative error of one term g_f·act_f of a d_probs entry that d_w_router's check allows:
// about 4× the typical. Emulated on the CPU (bf16 pre and g, the router kernel in fp32, bf16
// d_logits) over fuzz seed 12128171125868211367's cases where the scale is at least twice
// ||d_w_router||, the error was 1.4e-3 of the scale (median), 4.4e-3 at most; case 147 under
// random roundings 1.5e-3, at most 6.8e-3 in 2000 draws. Where nothing cancels the max keeps
// tolerance(): the scale is below 2.56× ||d_w_router|| in 9 of 10 cases, 2.2× in the case of
// the fixed fp32 centring bug (seed 4313617619543845595, case 129, 2.7% off), which still fails.
inline constexpr double kDpTermError = 0x1p-7;

// Every way `got` misses `want` (tolerance above; losses each within 1e-4 relative; d_w_router
// within the larger of tolerance and kDpTermError·||want.d_w_router_error_scale|| / ||want||),
// one line each naming the tensor, its rel-norm error and its worst element; empty when all match.
std::vector<std::string> step_mismatches(const StepResult& got, const StepResult& want);

}  // namespace moefuse::test
