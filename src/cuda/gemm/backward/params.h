// What one backward grouped-GEMM launch needs on the device: plain structs passed by value as
// kernel parameters (so a captured CUDA graph holds them).
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

#include "cuda/gemm/params.h"

namespace moefuse::gemm::bwd {

// A permute run by the plain dgrad's epilogue warps between tiles (side_permute.cuh):
// xs[row_of[t, j]] = x[t], rows whose token_of_row is -1 zeroed.
struct SidePermute {
  const uint4* x = nullptr;               // [tokens, vecs] bf16 rows
  const int32_t* row_of = nullptr;        // [tokens, top_k]
  const int32_t* token_of_row = nullptr;  // [rows]
  uint4* xs = nullptr;                    // [rows, vecs]; null: no permute
  int tokens = 0, top_k = 0, rows = 0, vecs = 0;
  int32_t* health = nullptr;  // or null
};

// dgrad: D[r] = A[r] · B[e], A [m_cap, k] K-major, B [E, k, n] read MN-major (n contiguous).
struct DgradProblem {
  const int* offsets = nullptr;  // [num_experts + 1], device
  int num_experts = 0;
  int m_cap = 0;
  int n = 0;
  int k = 0;
  void* d = nullptr;  // [m_cap, n]; unused by the dGLU epilogue
  bool d_fp32 = false;
  SidePermute permute;  // run by the plain store's epilogue warps (side_permute.cuh), or none
};

// The FC2-dgrad epilogue (enabled iff pre != nullptr). With g = the accumulator (n = F):
// d_pre = activation'(pre) ⊙ (p·g); scaled_act = p·act(pre); dp_partial[r, n-block] = Σ g·act.
struct DGluEpilogue {
  EpilogueParams act;                     // op and clamp parameters only
  const __nv_bfloat16* pre = nullptr;     // [m_cap, 2n] (GLU, interleaved) or [m_cap, n]
  __nv_bfloat16* d_pre = nullptr;         // same shape as pre
  __nv_bfloat16* scaled_act = nullptr;    // [m_cap, n] or null
  const float* row_scale = nullptr;       // [m_cap] or null (p = 1)
  float* dp_partial = nullptr;            // [m_cap, dp_stride] or null
  int dp_stride = 0;                      // >= the n-blocks
};

// wgrad: D[e] (+)= A_eᵀ · B_e over expert e's rows; A [m_cap, m_out], B [m_cap, n_out], both
// read MN-major (the rows are the reduction dimension).
struct WgradProblem {
  const int* offsets = nullptr;  // [num_experts + 1], device
  int num_experts = 0;
  int m_cap = 0;
  int m_out = 0;
  int n_out = 0;
  void* d = nullptr;  // [num_experts, m_out, n_out]
  bool d_fp32 = true;
  bool accumulate = false;  // fp32 only
  // Gather-fused B: row r of B is gather_x[gather_index[r]] (zeros outside [0, gather_rows)).
  const __nv_bfloat16* gather_x = nullptr;  // [gather_rows, n_out]
  const int* gather_index = nullptr;        // [m_cap]
  int gather_rows = 0;
};

}  // namespace moefuse::gemm::bwd
