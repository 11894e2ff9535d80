// The router's small GEMMs through cuBLAS (bf16 operands, fp32 compute). Row-major tensors are
// handed to column-major cuBLAS as their transposes:
//   logits     [T, E]: logitsᵀ = Wr(col [H, E])ᵀ · xᵀ(col [H, T])        m=E n=T k=H
//   dx         [T, H]: dxᵀ     = Wrᵀ(col [H, E]) · d_logitsᵀ(col [E, T])  m=H n=T k=E, beta 1
//   d_w_router [E, H]: dWrᵀ    = xᵀ(col [H, T]) · d_logits(col [E, T])ᵀ  m=H n=E k=T
// The last has few output tiles and a K of T: it is split along T (router_dw_split.h) into a
// strided batch of GEMMs writing fp32 partials, summed in a fixed order.
// Every call binds the caller's handle to the stream and to the caller's workspace, so that no
// call allocates (cuBLAS's requirement for graph capture). The backward's two GEMMs are separate
// functions (router_gemm.h) so that the bench times each.
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <string>

#include "cuda/check.h"
#include "cuda/device.h"
#include "cuda/router/checks.h"
#include "cuda/router/router_args.h"
#include "cuda/router/router_dw_split.h"
#include "cuda/router/router_gemm.h"
#include "cuda/sm_count.h"
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

// cuBLAS's recommended workspace on Hopper. The backward's GEMMs give cuBLAS the first
// kBackwardCublas bytes of it (its GEMMs there are split by us, not by cuBLAS) and keep the rest
// for the dWr partials.
constexpr size_t kCublasWorkspace = size_t{32} << 20;
constexpr size_t kBackwardCublas = size_t{8} << 20;
constexpr size_t kDwPartialBytes = kCublasWorkspace - kBackwardCublas;

void bind(cublasHandle_t cublas, void* workspace, size_t bytes, cudaStream_t stream) {
  MOEFUSE_CUBLAS_CHECK(cublasSetStream(cublas, stream));
  MOEFUSE_CUBLAS_CHECK(cublasSetWorkspace(cublas, workspace, bytes));
}

// out[i] = Σ_p parts[p·n + i], p in order (accumulate: out[i] + that sum).
__global__ void sum_parts_kernel(const float* __restrict__ parts, int64_t num_parts, int64_t n,
                                 float* __restrict__ out, bool accumulate) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    float sum = 0;
    for (int64_t p = 0; p < num_parts; ++p) sum += parts[p * n + i];
    out[i] = accumulate ? out[i] + sum : sum;
  }
}

unsigned grid_for(int64_t n) {
  return static_cast<unsigned>(std::min<int64_t>((n + 255) / 256, 4096));
}

__global__ void to_bf16_kernel(const float* __restrict__ in, __nv_bfloat16* __restrict__ out,
                               int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x)
    out[i] = __float2bfloat16_rn(in[i]);
}

}  // namespace

size_t router_gemm_workspace_size() { return kCublasWorkspace; }

void round_to_bf16(const float* in, __nv_bfloat16* out, int64_t n, cudaStream_t stream) {
  if (n == 0) return;
  to_bf16_kernel<<<grid_for(n), 256, 0, stream>>>(in, out, n);
  MOEFUSE_CUDA_CHECK_LAUNCH();
}

void router_dx_gemm(const RouterGemmBackward& g, cudaStream_t stream) {
  bind(g.cublas, g.gemm_workspace, kBackwardCublas, stream);
  const float one = 1.0f;
  MOEFUSE_CUBLAS_CHECK(cublasGemmEx(g.cublas, CUBLAS_OP_N, CUBLAS_OP_N, g.hidden, g.tokens,
                                    g.experts, &one, g.w_router, CUDA_R_16BF, g.hidden,
                                    g.d_logits16, CUDA_R_16BF, g.experts, &one, g.dx, CUDA_R_16BF,
                                    g.hidden, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

size_t router_dw_partial_bytes() { return kDwPartialBytes; }

void router_dw_gemm(const RouterGemmBackward& g, cudaStream_t stream) {
  router_dw_gemm(g, plan_dw_split(g.tokens, g.hidden, g.experts, device_sm_count(),
                                  kDwPartialBytes),
                 stream);
}

void router_dw_gemm(const RouterGemmBackward& g, const DwSplit& split, cudaStream_t stream) {
  MOEFUSE_EXPECT(split.parts * g.experts * g.hidden * sizeof(float) <= kDwPartialBytes ||
                     split.parts == 1,
                 "split.parts", "partials that fit " + std::to_string(kDwPartialBytes) + " bytes",
                 std::to_string(split.parts));
  bind(g.cublas, g.gemm_workspace, kBackwardCublas, stream);
  const float one = 1.0f, zero = 0.0f;
  const int64_t H = g.hidden, E = g.experts;
  // One GEMM of K = `tokens` rows of x and d_logits from token `first` on, into `out` [E, H]
  // (beta: 0 overwrites, 1 adds the old value).
  auto gemm = [&](int64_t first, int64_t tokens, int batch, float* out, const float* beta) {
    MOEFUSE_CUBLAS_CHECK(cublasGemmStridedBatchedEx(
        g.cublas, CUBLAS_OP_N, CUBLAS_OP_T, g.hidden, g.experts, static_cast<int>(tokens), &one,
        g.x + first * H, CUDA_R_16BF, g.hidden, split.chunk * H, g.d_logits16 + first * E,
        CUDA_R_16BF, g.experts, split.chunk * E, beta, out, CUDA_R_32F, g.hidden, E * H, batch,
        CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
  };
  if (split.parts == 1) {
    gemm(0, g.tokens, 1, g.d_w_router, g.accumulate ? &one : &zero);
    return;
  }
  float* parts = reinterpret_cast<float*>(static_cast<unsigned char*>(g.gemm_workspace) +
                                          kBackwardCublas);
  const int64_t full = g.tokens / split.chunk, rest = g.tokens - full * split.chunk;
  gemm(0, split.chunk, static_cast<int>(full), parts, &zero);
  if (rest > 0) gemm(full * split.chunk, rest, 1, parts + full * E * H, &zero);
  sum_parts_kernel<<<grid_for(E * H), 256, 0, stream>>>(parts, split.parts, E * H, g.d_w_router,
                                                        g.accumulate);
  MOEFUSE_CUDA_CHECK_LAUNCH();
}

}  // namespace cuda

size_t router_logits_workspace_size() { return cuda::kCublasWorkspace; }

void router_logits(cublasHandle_t cublas, const TensorView& x, const TensorView& w_router,
                   const TensorView& logits, Workspace workspace, cudaStream_t stream) {
  const cuda::GemmShape s = cuda::check_router_logits(x, w_router, logits);
  MOEFUSE_EXPECT(cublas != nullptr, "cublas", "a cuBLAS handle", "nullptr");
  cuda::expect_workspace(workspace, router_logits_workspace_size());
  cuda::expect_launchable(stream);
  if (s.tokens == 0) return;
  cuda::bind(cublas, workspace.data, cuda::kCublasWorkspace, stream);
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
                            cudaStream_t stream, bool accumulate_d_w_router) {
  const cuda::GemmShape s =
      cuda::check_router_logits_backward(x, w_router, d_logits, dx, d_w_router);
  MOEFUSE_EXPECT(cublas != nullptr, "cublas", "a cuBLAS handle", "nullptr");
  cuda::expect_workspace(workspace, router_logits_backward_workspace_size(s.tokens, s.experts));
  cuda::expect_launchable(stream);
  if (s.tokens == 0) {  // no token: a zero gradient, nothing to add
    if (!accumulate_d_w_router)
      MOEFUSE_CUDA_CHECK(cudaMemsetAsync(d_w_router.data, 0,
                                         sizeof(float) * s.experts * s.hidden, stream));
    return;
  }
  auto* dl16 = reinterpret_cast<__nv_bfloat16*>(static_cast<unsigned char*>(workspace.data) +
                                                cuda::kCublasWorkspace);
  cuda::round_to_bf16(d_logits.as<const float>(), dl16, s.tokens * s.experts, stream);
  const cuda::RouterGemmBackward g{
      .cublas = cublas,
      .gemm_workspace = workspace.data,
      .x = x.as<const __nv_bfloat16>(),
      .w_router = w_router.as<const __nv_bfloat16>(),
      .d_logits16 = dl16,
      .dx = is_absent(dx) ? nullptr : dx.as<__nv_bfloat16>(),
      .d_w_router = d_w_router.as<float>(),
      .tokens = static_cast<int>(s.tokens),
      .hidden = static_cast<int>(s.hidden),
      .experts = static_cast<int>(s.experts),
      .accumulate = accumulate_d_w_router,
  };
  if (g.dx) cuda::router_dx_gemm(g, stream);
  cuda::router_dw_gemm(g, stream);
}

}  // namespace moefuse
