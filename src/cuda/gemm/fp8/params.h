// What one FP8 grouped GEMM launch needs on the device, passed by value as a kernel parameter
// (a captured CUDA graph holds it).
#pragma once

#include "cuda/gemm/params.h"

namespace moefuse::gemm::fp8 {

struct Fp8GemmProblem {
  const int* offsets = nullptr;    // [num_experts + 1], device
  const float* b_scales = nullptr; // [num_experts, ceil(n/128), ceil(k/128)]
  int num_experts = 0;
  int m_cap = 0;  // rows of A and D
  int n = 0;      // columns of h = A·Bᵀ
  int k = 0;
  int n_out = 0;  // columns of D: n / 2 for GLU, n otherwise
  void* d = nullptr;
};

}  // namespace moefuse::gemm::fp8
