#include "bench/cublas_baseline.h"

#include <cuda_bf16.h>

#include <string>

#include "moefuse/error.h"

namespace moefuse::bench {
namespace {

void check(cublasStatus_t status, const char* call) {
  if (status != CUBLAS_STATUS_SUCCESS)
    throw CudaError(call, cublasGetStatusString(status), __FILE__, __LINE__);
}

constexpr size_t kWorkspaceBytes = size_t{64} << 20;  // cuBLAS's recommendation for Hopper: 32 MiB+

}  // namespace

CublasBaseline::CublasBaseline() : workspace_(kWorkspaceBytes) {
  check(cublasCreate(&handle_), "cublasCreate");
  check(cublasSetWorkspace(handle_, workspace_.get(), workspace_.bytes()), "cublasSetWorkspace");
}

CublasBaseline::~CublasBaseline() { cublasDestroy(handle_); }

void CublasBaseline::gemm_bf16(const void* a, const void* b, void* d, int64_t m, int64_t n,
                               int64_t k, cudaStream_t stream) {
  if (m == 0) return;
  check(cublasSetStream(handle_, stream), "cublasSetStream");
  const float alpha = 1.0f, beta = 0.0f;
  // Column-major view: Dᵀ [n, m] = (B as k×n)ᵀ · (A as k×m).
  check(cublasGemmEx(handle_, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(n), static_cast<int>(m),
                     static_cast<int>(k), &alpha, b, CUDA_R_16BF, static_cast<int>(k), a,
                     CUDA_R_16BF, static_cast<int>(k), &beta, d, CUDA_R_16BF, static_cast<int>(n),
                     CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
        "cublasGemmEx");
}

void CublasBaseline::per_expert_bf16(const void* a, const void* b, void* d,
                                     const std::vector<int32_t>& offsets, int64_t n, int64_t k,
                                     cudaStream_t stream) {
  const auto* a16 = static_cast<const __nv_bfloat16*>(a);
  const auto* b16 = static_cast<const __nv_bfloat16*>(b);
  auto* d16 = static_cast<__nv_bfloat16*>(d);
  for (size_t e = 0; e + 1 < offsets.size(); ++e) {
    const int64_t rows = offsets[e + 1] - offsets[e];
    gemm_bf16(a16 + offsets[e] * k, b16 + e * n * k, d16 + offsets[e] * n, rows, n, k, stream);
  }
}

}  // namespace moefuse::bench
