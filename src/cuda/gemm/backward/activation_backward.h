// The activation's value and derivatives in fp32, shared by the fused dGLU epilogue and the
// unfused twin's elementwise kernel, and checked on the CPU against ref::activation_backward
// (tests/cpu/gemm_backward_activation_test.cpp).
//
// Same conventions as the forward's epilogues/activation.h: GLU ops combine a gate g and an up
// value u; kSquaredReLU reads only g (d_up is 0). The value is the forward's apply_op, so the
// recomputed activation is bit-identical to the forward's. GPT-OSS's clamped SwiGLU stops the
// gradient where a clamp is active (torch.clamp: the bound itself passes), as the reference.
//
// As in the forward, the op is a compile-time choice (activation_grad_op<kOp>) for the fused
// epilogue's fully unrolled loop: a switch per element inlined every op's derivative for each of
// the 128 accumulators, and that code outgrew the instruction cache (docs/grouped_gemm_backward.md).
#pragma once

#include <cmath>

#include "cuda/gemm/epilogues/activation.h"
#include "cuda/gemm/params.h"

namespace moefuse::gemm::bwd {

struct ActivationGrad {
  float value;   // activation(g, u)
  float d_gate;  // ∂value/∂g
  float d_up;    // ∂value/∂u
};

template <EpilogueOp kOp>
MOEFUSE_EPI_FN ActivationGrad activation_grad_op(const EpilogueParams& ep, float g, float u) {
  const float value = apply_op<kOp>(ep, g, u);
  if constexpr (kOp == EpilogueOp::kLinear) {
    return {value, 1.0f, 0.0f};
  } else if constexpr (kOp == EpilogueOp::kSwiGLU) {
    // d/dg (g·σ(g)) = σ + g·σ·(1 - σ): with a = g·σ, σ + a·(1 - σ) (one FFMA).
    const float s = sigmoid_f32(g);
    const float a = g * s;
    return {value, u * fmaf(a, 1.0f - s, s), a};
  } else if constexpr (kOp == EpilogueOp::kGeGLU) {
    const float cdf = 0.5f * (1.0f + erff(g * 0.70710678118654752f));
    const float pdf = 0.39894228040143268f * expf(-0.5f * g * g);
    return {value, u * (cdf + g * pdf), g * cdf};
  } else if constexpr (kOp == EpilogueOp::kReGLU) {
    return {value, g > 0.0f ? u : 0.0f, fmaxf(g, 0.0f)};
  } else if constexpr (kOp == EpilogueOp::kClampedSwiGLU) {
    const float gc = fminf(g, ep.clamp_limit);
    const float uc = fminf(fmaxf(u, -ep.clamp_limit), ep.clamp_limit);
    const float s = sigmoid_f32(ep.clamp_alpha * gc);
    const float d_gc = (uc + 1.0f) * s * (1.0f + ep.clamp_alpha * gc * (1.0f - s));
    return {value, g <= ep.clamp_limit ? d_gc : 0.0f,
            (u >= -ep.clamp_limit && u <= ep.clamp_limit) ? gc * s : 0.0f};
  } else {
    static_assert(kOp == EpilogueOp::kSquaredReLU);
    return {value, 2.0f * fmaxf(g, 0.0f), 0.0f};
  }
}

// The runtime form, for elementwise kernels whose loop body is small (and the CPU test).
MOEFUSE_EPI_FN ActivationGrad activation_grad(const EpilogueParams& ep, float g, float u) {
  return dispatch_epilogue_op(
      ep.op, [&](auto op) { return activation_grad_op<decltype(op)::value>(ep, g, u); });
}

}  // namespace moefuse::gemm::bwd
