// Host entry points of the backward kernels (arguments already validated by
// grouped_gemm_backward.cpp): one per kernel instantiation, plus the small helper kernels.
#pragma once

#include <cuda_runtime.h>

#include "cuda/gemm/backward/params.h"

namespace moefuse::gemm::bwd {

struct DgradLaunch {
  DgradProblem problem;
  DGluEpilogue dglu;
  const void* a = nullptr;  // [m_cap, k] bf16
  const void* b = nullptr;  // [num_experts, k, n] bf16
  int max_ctas = 0;         // persistent CTAs at most (0: one per SM)
};
void launch_dgrad(const DgradLaunch& launch, cudaStream_t stream);

struct WgradLaunch {
  WgradProblem problem;
  const void* a = nullptr;  // [m_cap, m_out] bf16
  const void* b = nullptr;  // [m_cap, n_out] bf16 (unused when gathering)
  int max_ctas = 0;         // persistent CTAs at most (0: one per SM)
};
void launch_wgrad(const WgradLaunch& launch, cudaStream_t stream);
void launch_wgrad_gather(const WgradLaunch& launch, cudaStream_t stream);

// dp[r] = Σ_{b < dp_blocks} dp_partial[r, b] (b in order) + the b2 term for the rows in
// [offsets[0], min(offsets[E], m_cap)). The b2 term: Σ_{q < bias_pieces} bias_partial[q, r] (q in
// order; launch_segment_sums's dot partials, from the pass over dys that d_b2 makes), or else
// ⟨dys[r], b2[e]⟩ read here (b2 null: none).
struct DpReduce {
  const int* offsets = nullptr;
  int num_experts = 0;
  int m_cap = 0;
  int hidden = 0;
  const float* dp_partial = nullptr;  // [m_cap, dp_stride]
  int dp_stride = 0;
  int dp_blocks = 0;  // the dGLU shape's n-blocks
  const __nv_bfloat16* dys = nullptr;  // [m_cap, hidden]
  const float* b2 = nullptr;           // [num_experts, hidden] or null
  const float* bias_partial = nullptr;  // [bias_pieces, m_cap] or null (then b2 is read here)
  int bias_pieces = 0;
  float* dp = nullptr;  // [m_cap]
};
void launch_dp_reduce(const DpReduce& r, cudaStream_t stream);

// The unfused twin's elementwise step: from g (bf16 [m_cap, n]) computes what the fused dGLU
// epilogue writes, and dp (complete, with the b2 term of `r`; r.dp null: no dp).
void launch_dglu_elementwise(const DgradProblem& problem, const DGluEpilogue& ep,
                             const __nv_bfloat16* g, const DpReduce& r, cudaStream_t stream);

}  // namespace moefuse::gemm::bwd
