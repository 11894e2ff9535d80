// Host entry points of the FP8 grouped GEMM kernel, one per output type. Arguments are already
// validated (grouped_gemm_fp8.cpp).
#pragma once

#include <cuda_runtime.h>

#include "cuda/gemm/fp8/params.h"

namespace moefuse::gemm::fp8 {

struct Fp8GemmLaunch {
  Fp8GemmProblem problem;
  EpilogueParams epilogue;  // bias and pre unused (null)
  const void* a = nullptr;         // [m_cap, k] e4m3
  const void* a_scales = nullptr;  // [ceil(k/128), fp8_scale_rows(m_cap)] fp32
  const void* b = nullptr;         // [num_experts, n, k] e4m3
};

void launch_grouped_gemm_fp8_bf16(const Fp8GemmLaunch& launch, cudaStream_t stream);
void launch_grouped_gemm_fp8_fp32(const Fp8GemmLaunch& launch, cudaStream_t stream);

}  // namespace moefuse::gemm::fp8
