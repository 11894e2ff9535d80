// What one grouped GEMM launch needs on the device: the problem and the epilogue, both plain
// structs passed by value as kernel parameters (so a captured CUDA graph holds them).
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

#include "moefuse/config.h"

namespace moefuse::gemm {

// The epilogue's elementwise operation. A runtime value (uniform across the grid): one kernel
// instantiation serves every activation, the branch costs nothing next to the mainloop.
enum class EpilogueOp : uint8_t {
  kLinear,
  kSwiGLU,
  kGeGLU,
  kReGLU,
  kClampedSwiGLU,
  kSquaredReLU,
};

// The epilogue op computing `a` (host side; throws InvalidArgument naming "activation" for a
// value outside the enum).
EpilogueOp activation_epilogue_op(Activation a);

constexpr bool is_glu_op(EpilogueOp op) {
  return op == EpilogueOp::kSwiGLU || op == EpilogueOp::kGeGLU || op == EpilogueOp::kReGLU ||
         op == EpilogueOp::kClampedSwiGLU;
}

struct GemmProblem {
  const int* offsets = nullptr;  // [num_experts + 1], device
  int num_experts = 0;
  int m_cap = 0;  // rows of D (and of A unless gathering)
  int n = 0;      // columns of h = A·Bᵀ
  int k = 0;
  int n_out = 0;  // columns of D: n / 2 for GLU, n otherwise
  void* d = nullptr;
  // Gather-fused A (only read by the gather kernel): row r reads x[gather_index[r]].
  const __nv_bfloat16* gather_x = nullptr;  // [gather_rows, k]
  const int* gather_index = nullptr;        // [m_cap]
  int gather_rows = 0;
};

struct EpilogueParams {
  EpilogueOp op = EpilogueOp::kLinear;
  float clamp_alpha = 0.0f;  // kClampedSwiGLU
  float clamp_limit = 0.0f;
  const float* bias = nullptr;         // [num_experts, n] or null
  const float* row_scale = nullptr;    // [m_cap] or null
  __nv_bfloat16* pre = nullptr;        // [m_cap, n] or null: h (+ bias) saved for backward
};

}  // namespace moefuse::gemm
