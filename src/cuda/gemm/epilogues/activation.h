// The epilogue's elementwise math in fp32, shared by the fused epilogue and the unfused twin's
// elementwise kernel so that both compute exactly the same function.
//
// Definitions follow moefuse::Activation (config.h). GLU ops combine a gate g and an up value u;
// kSquaredReLU and kLinear read only g.
#pragma once

#include <cmath>
#include <type_traits>

#include "cuda/gemm/params.h"

#if defined(__CUDACC__)
#define MOEFUSE_EPI_FN __host__ __device__ __forceinline__
#else
#define MOEFUSE_EPI_FN inline
#endif

namespace moefuse::gemm {

// σ(x) = 1 / (1 + e^-x). On the GPU by ex2.approx.ftz and rcp.approx.ftz, four instructions (a
// few ulp in fp32, far below the bf16 rounding of every output). expf and the IEEE division,
// with its slow-path call, made the FC2 dgrad's dSwiGLU octet 432 SASS instructions; this form
// (with the derivative as one FFMA, activation_backward.h) 208. That epilogue is issue-bound on
// its three warps (docs/grouped_gemm_backward.md). As x → -∞, e^-x → inf and rcp gives 0.
MOEFUSE_EPI_FN float sigmoid_f32(float x) {
#if defined(__CUDA_ARCH__)
  float e, r;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(e) : "f"(x * -1.4426950408889634f));
  asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(1.0f + e));
  return r;
#else
  return 1.0f / (1.0f + std::exp(-x));
#endif
}

// The operation as a compile-time choice: the fused epilogue instantiates its fully unrolled
// loop once per op, so each copy holds only its own math. (One loop with the switch inside
// inlined every op's code for each of the 128 accumulators: the code outgrew the instruction
// cache and the epilogue took longer than the mainloop; docs/measurements.md.)
template <EpilogueOp kOp>
MOEFUSE_EPI_FN float apply_op(const EpilogueParams& ep, float g, float u) {
  if constexpr (kOp == EpilogueOp::kLinear) {
    return g;
  } else if constexpr (kOp == EpilogueOp::kSwiGLU) {
    return g * sigmoid_f32(g) * u;
  } else if constexpr (kOp == EpilogueOp::kGeGLU) {
    return 0.5f * g * (1.0f + erff(g * 0.70710678118654752f)) * u;
  } else if constexpr (kOp == EpilogueOp::kReGLU) {
    return fmaxf(g, 0.0f) * u;
  } else if constexpr (kOp == EpilogueOp::kClampedSwiGLU) {
    const float gc = fminf(g, ep.clamp_limit);
    const float uc = fminf(fmaxf(u, -ep.clamp_limit), ep.clamp_limit);
    return gc * sigmoid_f32(ep.clamp_alpha * gc) * (uc + 1.0f);
  } else {
    static_assert(kOp == EpilogueOp::kSquaredReLU);
    const float r = fmaxf(g, 0.0f);
    return r * r;
  }
}

// Calls f(std::integral_constant<EpilogueOp, op>{}) for the runtime `op`: one switch, outside
// whatever loop f runs.
template <class F>
MOEFUSE_EPI_FN decltype(auto) dispatch_epilogue_op(EpilogueOp op, F&& f) {
  switch (op) {
    case EpilogueOp::kSwiGLU: return f(std::integral_constant<EpilogueOp, EpilogueOp::kSwiGLU>{});
    case EpilogueOp::kGeGLU: return f(std::integral_constant<EpilogueOp, EpilogueOp::kGeGLU>{});
    case EpilogueOp::kReGLU: return f(std::integral_constant<EpilogueOp, EpilogueOp::kReGLU>{});
    case EpilogueOp::kClampedSwiGLU:
      return f(std::integral_constant<EpilogueOp, EpilogueOp::kClampedSwiGLU>{});
    case EpilogueOp::kSquaredReLU:
      return f(std::integral_constant<EpilogueOp, EpilogueOp::kSquaredReLU>{});
    case EpilogueOp::kLinear: break;
  }
  return f(std::integral_constant<EpilogueOp, EpilogueOp::kLinear>{});
}

// The runtime form, for elementwise kernels whose loop body is small.
MOEFUSE_EPI_FN float apply_epilogue_op(const EpilogueParams& ep, float g, float u) {
  return dispatch_epilogue_op(ep.op, [&](auto op) { return apply_op<decltype(op)::value>(ep, g, u); });
}

}  // namespace moefuse::gemm
