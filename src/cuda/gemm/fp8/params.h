// What one FP8 grouped GEMM launch needs on the device, passed by value as a kernel parameter
// (a captured CUDA graph holds it).
#pragma once

#include "cuda/gemm/cluster_scheduler.h"
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
  // E4M3 D only: its 1x128 scales, K-major [ceil(n_out/128), fp8_scale_rows(m_cap)]
  // (e4m3_drain.cuh).
  float* d_scales = nullptr;
  // How tiles pair into units: n-groups only for E4M3 GLU output (e4m3_drain.cuh says why).
  UnitPairs pairs = UnitPairs::kMGroupsFirst;
};

}  // namespace moefuse::gemm::fp8
