// CPU reference of the low-precision quantisation recipes: fp32 host tensors in, low-precision
// values plus scales out, and back. The per-group arithmetic lives in src/formats/recipes.h,
// shared with the GPU kernels; docs/formats.md gives the exact definitions.
//
// Every entry point validates its views (dtype, Device::kCpu, contiguous, shapes) and throws
// InvalidArgument naming the bad one. Scale tensors are row-major, one entry per group:
//
//   recipe                 values                     scales
//   blockwise FP8, 1x128   q [M, K] e4m3              [M, ceil(K/128)] fp32
//   blockwise FP8, 128x128 q [N, K] / [E, N, K] e4m3  [ceil(N/128), ceil(K/128)] / [E, ...] fp32
//   MXFP8, 1x32            q [M, K] e4m3              [M, ceil(K/32)] e8m0
//   NVFP4, 1x16            q [M, K] e2m1 (K even,     [M, ceil(K/16)] e4m3, plus
//                          two per byte, low first)   tensor_scale [1] fp32
//
// A last group shorter than the group size (K or N not a multiple of it) is a group of its own
// over the elements that exist.
#pragma once

#include "moefuse/tensor.h"

namespace moefuse::ref {

// Activations, 1x128 groups along K: x [M, K] fp32 -> q [M, K] e4m3, scales [M, ceil(K/128)].
void quantize_fp8_blockwise_1x128(const TensorView& x, const TensorView& q,
                                  const TensorView& scales);
void dequantize_fp8_blockwise_1x128(const TensorView& q, const TensorView& scales,
                                    const TensorView& x);

// Weights, 128x128 blocks: w [N, K] or stacked [E, N, K] fp32 -> q of the same shape, e4m3,
// scales [ceil(N/128), ceil(K/128)] or [E, ceil(N/128), ceil(K/128)].
void quantize_fp8_blockwise_128x128(const TensorView& w, const TensorView& q,
                                    const TensorView& scales);
void dequantize_fp8_blockwise_128x128(const TensorView& q, const TensorView& scales,
                                      const TensorView& w);

// MXFP8, 32-element blocks along K: x [M, K] fp32 -> q [M, K] e4m3, scales [M, ceil(K/32)] e8m0.
void quantize_mxfp8(const TensorView& x, const TensorView& q, const TensorView& scales);
void dequantize_mxfp8(const TensorView& q, const TensorView& scales, const TensorView& x);

// MXFP8 quantise-dequantise (fake quantisation): out = dequantize_mxfp8(quantize_mxfp8(x)), the
// fp32 values (moefuse::qdq_mxfp8_* returns them rounded to bf16, which is exact but below
// 2^-130). The checks are the GPU passes' (src/cuda/quant/qdq_validate.h) for fp32 CPU tensors,
// plus the offsets' values; out may be x.
// Rows: x, out [M, K], K % 32 == 0; blocks of 32 consecutive elements of a row (quantize_mxfp8's).
void qdq_mxfp8_rows(const TensorView& x, const TensorView& out);
// Columns: x, out [M, N], N % 8 == 0; blocks of 32 consecutive rows of one column. offsets int32
// [E+1] (checked: offsets[0] >= 0, non-decreasing, offsets[E] <= M): expert e's blocks start at
// its first row offsets[e], its last one may be short, rows outside [offsets[0], offsets[E]) are
// not written. Or offsets absent (TensorView{}): blocks from row 0, M % 32 == 0.
void qdq_mxfp8_cols(const TensorView& x, const TensorView& offsets, const TensorView& out);

// MXFP8 column layout (moefuse/quant.h quantize_mxfp8_cols): x [M, N] fp32 -> q [M, N] e4m3,
// scales [mxfp8_col_blocks(M, E), N] e8m0, the blocks of qdq_mxfp8_cols (the checks are the GPU
// call's for fp32 CPU tensors, plus the offsets' values). Scale rows past the blocks' count and
// rows of q outside [offsets[0], offsets[E]) are left as they are; the dequantise writes x's rows
// of the blocks only.
void quantize_mxfp8_cols(const TensorView& x, const TensorView& offsets, const TensorView& q,
                         const TensorView& scales);
void dequantize_mxfp8_cols(const TensorView& q, const TensorView& offsets,
                           const TensorView& scales, const TensorView& x);

// NVFP4, 16-element blocks along K (K even): x [M, K] fp32 -> q [M, K] e2m1 (packed),
// block_scales [M, ceil(K/16)] e4m3, tensor_scale [1] fp32 (the decode scale, amax / (448 * 6)
// up to rounding; docs/formats.md).
void quantize_nvfp4(const TensorView& x, const TensorView& q, const TensorView& block_scales,
                    const TensorView& tensor_scale);
// The same with the tensor amax given, amax [1] fp32 (distinct from tensor_scale), as
// moefuse::quantize_nvfp4_with_amax: an amax below max |x| saturates block scales at 448 and
// codes at +-6; 0, Inf and NaN behave as that header says. quantize_nvfp4 is this with max |x|.
void quantize_nvfp4_with_amax(const TensorView& x, const TensorView& q,
                              const TensorView& block_scales, const TensorView& amax,
                              const TensorView& tensor_scale);
void dequantize_nvfp4(const TensorView& q, const TensorView& block_scales,
                      const TensorView& tensor_scale, const TensorView& x);

}  // namespace moefuse::ref
