// Host entry points of the grouped GEMM's kernels, one per instantiation, plus the unfused
// twin's helper kernels. Arguments are already validated (grouped_gemm.cpp).
#pragma once

#include <cuda_runtime.h>

#include "cuda/gemm/params.h"

namespace moefuse::gemm {

struct GemmLaunch {
  GemmProblem problem;
  EpilogueParams epilogue;
  const void* a = nullptr;  // [m_cap, k] bf16 (unused when gathering)
  const void* b = nullptr;  // [num_experts, n, k] bf16
  int max_ctas = 0;         // persistent CTAs at most (0: one per SM)
};

// The fused kernel; output bf16 or fp32; gather: A rows through problem.gather_index. The bf16
// kernel in 128 × 192 tiles: `_narrow` (config.h narrow_width says where).
void launch_grouped_gemm_bf16(const GemmLaunch& launch, cudaStream_t stream);
void launch_grouped_gemm_bf16_narrow(const GemmLaunch& launch, cudaStream_t stream);
void launch_grouped_gemm_fp32(const GemmLaunch& launch, cudaStream_t stream);
void launch_grouped_gemm_gather_bf16(const GemmLaunch& launch, cudaStream_t stream);

// Unfused twin, step 1 (only with gather): out[r] = x[index[r]] for r in [offsets[0],
// offsets[E]) (zeros for an index outside [0, x_rows)).
void launch_gather_rows(const GemmProblem& problem, __nv_bfloat16* out, cudaStream_t stream);

// Unfused twin, step 3: D = op(h + bias) · row_scale for the rows in [offsets[0], offsets[E]).
// h is ep.pre (bf16, [m_cap, n]; rewritten with the bias added when there is one) when ep.op is
// an activation, else D itself (updated in place).
void launch_epilogue_elementwise(const GemmProblem& problem, const EpilogueParams& ep,
                                 bool out_fp32, cudaStream_t stream);

// [gate; up] ↔ interleaved rows (moefuse::glu_interleaved_row) of `outer` matrices of
// rows = 2F rows and row_bytes bytes each; to_interleaved picks the direction.
void launch_permute_glu_rows(const void* src, void* dst, int64_t outer, int64_t ffn,
                             int64_t row_bytes, bool to_interleaved, cudaStream_t stream);

}  // namespace moefuse::gemm
