// The layer's own small kernels: glue between the router, dispatch and grouped-GEMM ops.
// Arguments are validated by the layer before these run; all enqueue on `stream` only.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "moefuse/tensor.h"

namespace moefuse::layer {

// row_prob[row_of[i]] = probs[i] for the T·k assignments i (rows outside [0, rows) skipped):
// the routing probability per expert-contiguous row, FC2's row scale.
void scatter_row_prob(const float* probs, const int32_t* row_of, float* row_prob,
                      int64_t assignments, int64_t rows, cudaStream_t stream);

// d_probs[i] = d_row_prob[row_of[i]] (0 for an assignment without a row): back to [T, k].
void gather_row_prob_grad(const float* d_row_prob, const int32_t* row_of, float* d_probs,
                          int64_t assignments, int64_t rows, cudaStream_t stream);

// dst[r, :] = src[r, :] for the first min(*rows, max_rows) rows of `width` bf16 (width % 8 == 0,
// 16-byte aligned pointers), *rows read on the device: a buffer's filled rows, whose count the
// host never learns (expert parallelism's received rows).
void copy_leading_rows(const __nv_bfloat16* src, __nv_bfloat16* dst, const int32_t* rows,
                       int64_t max_rows, int64_t width, cudaStream_t stream);

// offsets = {0, tokens}: the shared expert as a one-expert grouped GEMM over all T rows.
void write_shared_offsets(int32_t* offsets, int64_t tokens, cudaStream_t stream);

// d[e, n] = Σ_{r ∈ [offsets[e], offsets[e+1])} (row_weight ? row_weight[r] : 1) · a[r, n]: a
// bias gradient (a [R, n] bf16, d [E, n] fp32, row_weight [R] fp32 or empty), fp32 accumulation
// in a fixed order (bitwise repeatable); with accumulate the old d[e, n] plus that sum. The
// kernels are the FC2 dgrad's d_b2 pass (cuda/gemm/backward/segment_sums.h); unit_sums is their
// scratch, [fc2_dgrad_d_b2_units(R, E), n] fp32 (moefuse/grouped_gemm_backward.h).
void bias_gradient(const TensorView& a, const TensorView& row_weight, const TensorView& offsets,
                   const TensorView& d, const TensorView& unit_sums, bool accumulate,
                   cudaStream_t stream);

// dst[g, r] = src[r, g] for r < rows, 1 for r in [rows, dst_cols): row-major 1x128 scales
// [rows, groups] (the quantiser's) to the FP8 GEMM's K-major [groups, dst_cols] layout
// (dst_cols = fp8_scale_rows(rows)), every entry written.
void transpose_scales(const float* src, float* dst, int64_t rows, int64_t groups,
                      int64_t dst_cols, cudaStream_t stream);

}  // namespace moefuse::layer
