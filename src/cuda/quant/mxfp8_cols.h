// The GPU dequantise of the MXFP8 column layout (moefuse/quant.h quantize_mxfp8_cols) into bf16:
// the operands of the BF16 GEMMs that emulate the MXFP8 backward (src/cuda/gemm/fp8/
// mxfp8_backward.cpp). Internal: a bf16 output, for a GEMM, is exact only above bf16's
// subnormals (moefuse/grouped_gemm_fp8.h, "How the GPU computes the MXFP8 recipe"), so the public
// dequantisers keep fp32.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "moefuse/tensor.h"

namespace moefuse::cuda::quant {

// q [M, N] (or [E, K, N], as [E·K, N]) e4m3 with its scales [mxfp8_col_blocks(M, E), N] e8m0 →
// out of q's shape, bf16: out = bf16(e4m3(q) · 2^(scale - 127)), rounded once to nearest even.
// offsets int32 [E + 1] with experts = E > 0, or experts = 0 (blocks of 32 rows from row 0).
// Arguments as validate_mxfp8_cols accepts them; rows outside [offsets[0], offsets[E]) of out are
// not written.
void dequantize_mxfp8_cols_bf16(const TensorView& q, const TensorView& offsets, int64_t experts,
                                const TensorView& scales, const TensorView& out,
                                cudaStream_t stream);

}  // namespace moefuse::cuda::quant
