// The epilogue's elementwise math in fp32, shared by the fused epilogue and the unfused twin's
// elementwise kernel so that both compute exactly the same function.
//
// Definitions follow moefuse::Activation (config.h). GLU ops combine a gate g and an up value u;
// kSquaredReLU and kLinear read only g.
#pragma once

#include <cmath>

#include "cuda/gemm/params.h"

#if defined(__CUDACC__)
#define MOEFUSE_EPI_FN __host__ __device__ __forceinline__
#else
#define MOEFUSE_EPI_FN inline
#endif

namespace moefuse::gemm {

MOEFUSE_EPI_FN float sigmoid_f32(float x) { return 1.0f / (1.0f + expf(-x)); }

MOEFUSE_EPI_FN float apply_epilogue_op(const EpilogueParams& ep, float g, float u) {
  switch (ep.op) {
    case EpilogueOp::kLinear:
      return g;
    case EpilogueOp::kSwiGLU:
      return g * sigmoid_f32(g) * u;
    case EpilogueOp::kGeGLU:
      return 0.5f * g * (1.0f + erff(g * 0.70710678118654752f)) * u;
    case EpilogueOp::kReGLU:
      return fmaxf(g, 0.0f) * u;
    case EpilogueOp::kClampedSwiGLU: {
      const float gc = fminf(g, ep.clamp_limit);
      const float uc = fminf(fmaxf(u, -ep.clamp_limit), ep.clamp_limit);
      return gc * sigmoid_f32(ep.clamp_alpha * gc) * (uc + 1.0f);
    }
    case EpilogueOp::kSquaredReLU: {
      const float r = fmaxf(g, 0.0f);
      return r * r;
    }
  }
  return g;
}

}  // namespace moefuse::gemm
