// The router's small GEMMs through cuBLAS (bf16 operands, fp32 compute). Row-major tensors are
// handed to column-major cuBLAS as their transposes:
//   logits     [T, E]: logitsᵀ = Wr(col [H, E])ᵀ · xᵀ(col [H, T])        m=E n=T k=H
//   dx         [T, H]: dxᵀ     = Wrᵀ(col [H, E]) · d_logitsᵀ(col [E, T])  m=H n=T k=E, beta 1
//   d_w_router [E, H]: dWrᵀ    = xᵀ(col [H, T]) · d_logits(col [E, T])ᵀ  m=H n=E k=T
// Every call binds the caller's handle to the stream and to the caller's workspace, so that no
// call allocates (cuBLAS's requirement for graph capture).
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "cuda/check.h"
#include "cuda/router/checks.h"
#include "cuda/router/router_args.h"
#include "moefuse/error.h"
#include "moefuse/router.h"

#define MOEFUSE_CUBLAS_CHECK(call)                                                          \
  do {                                                                                      \
    cublasStatus_t moefuse_status_ = (call);                                                \
    if (moefuse_status_ != CUBLAS_STATUS_SUCCESS)                                           \
      throw ::moefuse::CudaError(#call, cublasGetStatusString(moefuse_status_), __FILE__,   \
                                 __LINE__);                                                 \
  } while (0)

namespace moefuse {
namespace cuda {
namespace {

// cuBLAS's recommended workspace on Hopper.
constexpr size_t kCublasWorkspace = size_t{32} << 20;

void bind(cublasHandle_t cublas, void* workspace, cudaStream_t stream) {
  MOEFUSE_CUBLAS_CHECK(cublasSetStream(cublas, stream));
  MOEFUSE_CUBLAS_CHECK(cublasSetWorkspace(cublas, workspace, kCublasWorkspace));
}

__global__ void to_bf16_kernel(const float* __restrict__ in, __nv_bfloat16* __restrict__ out,
                               int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x)
    out[i] = __float2bfloat16_rn(in[i]);
}

}  // namespace
}  // namespace cuda

size_t router_logits_workspace_size() { return cuda::kCublasWorkspace; }

void router_logits(cublasHandle_t cublas, const TensorView& x, const TensorView& w_router,
                   const TensorView& logits, Workspace workspace, cudaStream_t stream) {
  const cuda::GemmShape s = cuda::check_router_logits(x, w_router, logits);
  MOEFUSE_EXPECT(cublas != nullptr, "cublas", "a cuBLAS handle", "nullptr");
  cuda::expect_workspace(workspace, router_logits_workspace_size());
  if (s.tokens == 0) return;
  cuda::bind(cublas, workspace.data, stream);
  const float one = 1.0f, zero = 0.0f;
  const int m = static_cast<int>(s.experts), n = static_cast<int>(s.tokens),
            k = static_cast<int>(s.hidden);
  MOEFUSE_CUBLAS_CHECK(cublasGemmEx(cublas, CUBLAS_OP_T, CUBLAS_OP_N, m, n, k, &one,
                                    w_router.data, CUDA_R_16BF, k, x.data, CUDA_R_16BF, k, &zero,
                                    logits.data, CUDA_R_32F, m, CUBLAS_COMPUTE_32F,
                                    CUBLAS_GEMM_DEFAULT));
}

size_t router_logits_backward_workspace_size(int64_t tokens, int64_t num_experts) {
  cuda::expect_in_range(tokens, "tokens", 0, INT32_MAX);
  cuda::expect_in_range(num_experts, "num_experts", 1, kRouterMaxExperts);
  return cuda::kCublasWorkspace +
         cuda::align_bytes(sizeof(__nv_bfloat16) * static_cast<size_t>(tokens * num_experts));
}

void router_logits_backward(cublasHandle_t cublas, const TensorView& x, const TensorView& w_router,
                            const TensorView& d_logits, const TensorView& dx,
                            const TensorView& d_w_router, Workspace workspace,
                            cudaStream_t stream) {
  const cuda::GemmShape s =
      cuda::check_router_logits_backward(x, w_router, d_logits, dx, d_w_router);
  MOEFUSE_EXPECT(cublas != nullptr, "cublas", "a cuBLAS handle", "nullptr");
  cuda::expect_workspace(workspace, router_logits_backward_workspace_size(s.tokens, s.experts));
  if (s.tokens == 0) {
    MOEFUSE_CUDA_CHECK(cudaMemsetAsync(d_w_router.data, 0,
                                       sizeof(float) * s.experts * s.hidden, stream));
    return;
  }
  auto* dl16 = reinterpret_cast<__nv_bfloat16*>(static_cast<unsigned char*>(workspace.data) +
                                                cuda::kCublasWorkspace);
  const int64_t n_dl = s.tokens * s.experts;
  const unsigned blocks = static_cast<unsigned>(std::min<int64_t>((n_dl + 255) / 256, 4096));
  cuda::to_bf16_kernel<<<blocks, 256, 0, stream>>>(d_logits.as<const float>(), dl16, n_dl);
  MOEFUSE_CUDA_CHECK_LAUNCH();
  cuda::bind(cublas, workspace.data, stream);
  const float one = 1.0f, zero = 0.0f;
  const int T = static_cast<int>(s.tokens), H = static_cast<int>(s.hidden),
            E = static_cast<int>(s.experts);
  MOEFUSE_CUBLAS_CHECK(cublasGemmEx(cublas, CUBLAS_OP_N, CUBLAS_OP_N, H, T, E, &one,
                                    w_router.data, CUDA_R_16BF, H, dl16, CUDA_R_16BF, E, &one,
                                    dx.data, CUDA_R_16BF, H, CUBLAS_COMPUTE_32F,
                                    CUBLAS_GEMM_DEFAULT));
  MOEFUSE_CUBLAS_CHECK(cublasGemmEx(cublas, CUBLAS_OP_N, CUBLAS_OP_T, H, E, T, &one, x.data,
                                    CUDA_R_16BF, H, dl16, CUDA_R_16BF, E, &zero, d_w_router.data,
                                    CUDA_R_32F, H, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

}  // namespace moefuse
