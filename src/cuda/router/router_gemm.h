// The two GEMMs of router_logits_backward, one call each, for router_gemm.cu and for the bench
// (which times them one by one). Row-major device operands; the GEMMs read d_logits already
// rounded to bf16. Each call binds `cublas` to `stream` and to part of `gemm_workspace`
// (router_gemm_workspace_size() bytes: cuBLAS's scratch and the dWr split's partials), so it
// allocates nothing and is capture safe. The two calls share the workspace: run them in order on
// one stream.
#pragma once

#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "cuda/router/router_dw_split.h"

namespace moefuse::cuda {

struct RouterGemmBackward {
  cublasHandle_t cublas;
  void* gemm_workspace;
  const __nv_bfloat16* x;           // [T, H]
  const __nv_bfloat16* w_router;    // [E, H]
  const __nv_bfloat16* d_logits16;  // [T, E]
  __nv_bfloat16* dx;                // [T, H], accumulated into; nullptr: not wanted
  float* d_w_router;                // [E, H], overwritten (accumulate: added to)
  int tokens, hidden, experts;  // tokens ≥ 1
  bool accumulate = false;
};

size_t router_gemm_workspace_size();

// out[i] = bf16(in[i]), n elements.
void round_to_bf16(const float* in, __nv_bfloat16* out, int64_t n, cudaStream_t stream);

// dx += d_logits16 · w_router (m=H n=T k=E in cuBLAS's column-major terms).
void router_dx_gemm(const RouterGemmBackward& g, cudaStream_t stream);

// d_w_router = d_logits16ᵀ · x (m=H n=E k=T: a long-K GEMM with few output tiles), split along
// T into plan_dw_split's parts (router_dw_split.h) and summed in part order; with accumulate the
// old d_w_router is added to that sum (cuBLAS's beta = 1 when there is one part).
void router_dw_gemm(const RouterGemmBackward& g, cudaStream_t stream);
// The same in the given split (the bench's comparison of part counts); its parts' partials must
// fit the workspace's room for them (router_dw_partial_bytes).
void router_dw_gemm(const RouterGemmBackward& g, const DwSplit& split, cudaStream_t stream);
size_t router_dw_partial_bytes();

}  // namespace moefuse::cuda
