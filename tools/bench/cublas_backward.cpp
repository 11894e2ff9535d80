#include "bench/cublas_backward.h"

#include "moefuse/error.h"

namespace moefuse::bench {
namespace {

void check(cublasStatus_t status, const char* call) {
  if (status != CUBLAS_STATUS_SUCCESS)
    throw CudaError(call, cublasGetStatusString(status), __FILE__, __LINE__);
}

constexpr size_t kWorkspaceBytes = size_t{64} << 20;  // as CublasBaseline

}  // namespace

CublasBackward::CublasBackward() : workspace_(kWorkspaceBytes) {
  check(cublasCreate(&handle_), "cublasCreate");
  check(cublasSetWorkspace(handle_, workspace_.get(), workspace_.bytes()), "cublasSetWorkspace");
}

CublasBackward::~CublasBackward() { cublasDestroy(handle_); }

// cuBLAS is column-major: a row-major [r, c] matrix is its column-major [c, r] transpose, so
// every call below computes Dᵀ.
void CublasBackward::dgrad_bf16(const void* a, const void* b, void* d, int64_t m, int64_t n,
                                int64_t k, cudaStream_t stream) {
  if (m == 0) return;
  check(cublasSetStream(handle_, stream), "cublasSetStream");
  const float alpha = 1.0f, beta = 0.0f;
  // Dᵀ [n, m] = (B as n×k) · (A as k×m).
  check(cublasGemmEx(handle_, CUBLAS_OP_N, CUBLAS_OP_N, static_cast<int>(n), static_cast<int>(m),
                     static_cast<int>(k), &alpha, b, CUDA_R_16BF, static_cast<int>(n), a,
                     CUDA_R_16BF, static_cast<int>(k), &beta, d, CUDA_R_16BF, static_cast<int>(n),
                     CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
        "cublasGemmEx");
}

void CublasBackward::wgrad_f32(const void* a, const void* b, void* d, int64_t m_out,
                               int64_t n_out, int64_t k, cudaStream_t stream) {
  wgrad_batched_f32(a, b, d, m_out, n_out, k, 1, stream);
}

void CublasBackward::wgrad_batched_f32(const void* a, const void* b, void* d, int64_t m_out,
                                       int64_t n_out, int64_t k, int64_t batches,
                                       cudaStream_t stream) {
  if (k == 0 || batches == 0) return;
  check(cublasSetStream(handle_, stream), "cublasSetStream");
  const float alpha = 1.0f, beta = 0.0f;
  // Dᵀ [n_out, m_out] = (B as n_out×k) · (A as m_out×k)ᵀ.
  check(cublasGemmStridedBatchedEx(
            handle_, CUBLAS_OP_N, CUBLAS_OP_T, static_cast<int>(n_out), static_cast<int>(m_out),
            static_cast<int>(k), &alpha, b, CUDA_R_16BF, static_cast<int>(n_out), k * n_out, a,
            CUDA_R_16BF, static_cast<int>(m_out), k * m_out, &beta, d, CUDA_R_32F,
            static_cast<int>(n_out), m_out * n_out, static_cast<int>(batches), CUBLAS_COMPUTE_32F,
            CUBLAS_GEMM_DEFAULT),
        "cublasGemmStridedBatchedEx");
}

}  // namespace moefuse::bench
