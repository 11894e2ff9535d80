// Host entry points of the FP8 grouped GEMM kernel, one per instantiation: the forward epilogue
// with bf16, fp32 or E4M3 output (codes and 1x128 scales), and the FC2 dgrad's dGLU epilogue.
// Arguments are already validated (grouped_gemm_fp8.cpp, fc2_dgrad_fp8.cpp).
#pragma once

#include <cuda_runtime.h>

#include "cuda/gemm/backward/params.h"
#include "cuda/gemm/fp8/params.h"

namespace moefuse::gemm::fp8 {

struct Fp8GemmLaunch {
  Fp8GemmProblem problem;
  EpilogueParams epilogue;  // forward kinds; pre with bf16 or E4M3 output (the staged tile)
  bwd::DGluEpilogue dglu;   // the dGLU kind only
  const void* a = nullptr;         // [m_cap, k] e4m3
  const void* a_scales = nullptr;  // [ceil(k/128), fp8_scale_rows(m_cap)] fp32
  const void* b = nullptr;         // [num_experts, n, k] e4m3
};

void launch_grouped_gemm_fp8_bf16(const Fp8GemmLaunch& launch, cudaStream_t stream);
void launch_grouped_gemm_fp8_fp32(const Fp8GemmLaunch& launch, cudaStream_t stream);
// problem.d_scales set; problem.pairs is chosen here (n-pairs for a GLU: e4m3_drain.cuh).
void launch_grouped_gemm_fp8_e4m3(const Fp8GemmLaunch& launch, cudaStream_t stream);
void launch_grouped_gemm_fp8_dglu(const Fp8GemmLaunch& launch, cudaStream_t stream);

}  // namespace moefuse::gemm::fp8
