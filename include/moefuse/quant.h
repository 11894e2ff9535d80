// GPU quantisation and dequantisation for the low-precision recipes (docs/formats.md): blockwise
// FP8 (1x128 activation groups, 128x128 weight blocks, fp32 scales), MXFP8 (1x32, UE8M0 scales)
// and NVFP4 (1x16, E4M3 block scales, fp32 tensor scale). Each output matches the CPU reference
// (src/ref/quant.h) bit for bit: both use the scalar codecs of src/formats/.
//
// All views are device tensors (Device::kCuda), contiguous, with 16-byte-aligned data, and K (the
// last extent) a multiple of 16. Inputs x / w are bf16 or fp32; dequantised outputs are fp32
// (the MXFP8 quantise-dequantise passes and the MXFP8 column layout at the end, bf16 only, say
// their own shapes).
// Scale layouts are row-major, one entry per group (the last group of a row may be short):
//   1x128:   q [M, K] e4m3,  scales [M, ceil(K/128)] fp32
//   128x128: q [N, K] or [E, N, K] e4m3, scales [ceil(N/128), ceil(K/128)] (or [E, ...]) fp32
//   MXFP8:   q [M, K] e4m3,  scales [M, ceil(K/32)] e8m0
//   NVFP4:   q [M, K] e2m1 (two per byte, low nibble first), block_scales [M, ceil(K/16)] e4m3,
//            amax [1] fp32 (quantize_nvfp4 writes max |x|; quantize_nvfp4_with_amax reads it),
//            tensor_scale [1] fp32 (written: decode scale), amax and tensor_scale distinct
//
// Every call enqueues on `stream` only, allocates nothing and never synchronises: all of them
// are CUDA-graph safe (quantize_nvfp4 is a memset plus two kernels, quantize_nvfp4_with_amax one
// kernel). Bad arguments throw moefuse::InvalidArgument naming the argument; launch failures
// throw moefuse::CudaError.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "moefuse/tensor.h"

namespace moefuse {

void quantize_fp8_blockwise_1x128(const TensorView& x, const TensorView& q,
                                  const TensorView& scales, cudaStream_t stream);
void quantize_fp8_blockwise_128x128(const TensorView& w, const TensorView& q,
                                    const TensorView& scales, cudaStream_t stream);
void quantize_mxfp8(const TensorView& x, const TensorView& q, const TensorView& scales,
                    cudaStream_t stream);
// NVFP4 in two passes over x: max |x| into `amax` (NaN ignored), then quantize_nvfp4_with_amax.
void quantize_nvfp4(const TensorView& x, const TensorView& q, const TensorView& block_scales,
                    const TensorView& amax, const TensorView& tensor_scale, cudaStream_t stream);
// NVFP4 in one pass over x, for callers that already hold the tensor amax (computed by the op
// that produced x, or delayed scaling): `amax` is read on the device only, never by the host, so
// the call stays sync-free and capturable, and the value it reads is the one on the stream when
// the kernel runs. With amax = max |x| the output is bit-identical to quantize_nvfp4's.
// tensor_scale = 1 / enc, enc = 2688 / amax capped at FLT_MAX (docs/formats.md), with amax taken
// as given:
// - amax < max |x|: a block whose own amax exceeds the given one gets the largest block scale,
//   448 (E4M3 satfinite), and its elements beyond ~amax the code +-6 (E2M1 saturates), so they
//   dequantise to +-2688 * tensor_scale (~ +-amax); the other blocks quantise as usual against
//   this tensor scale. Nothing becomes NaN or Inf.
// - amax 0, +-Inf, NaN or negative: enc = 1, tensor_scale = 1, as quantize_nvfp4 does for an
//   all-zero tensor or one holding an Inf: block scales e4m3(block_amax / 6), saturating at 448.
void quantize_nvfp4_with_amax(const TensorView& x, const TensorView& q,
                              const TensorView& block_scales, const TensorView& amax,
                              const TensorView& tensor_scale, cudaStream_t stream);

void dequantize_fp8_blockwise_1x128(const TensorView& q, const TensorView& scales,
                                    const TensorView& x, cudaStream_t stream);
void dequantize_fp8_blockwise_128x128(const TensorView& q, const TensorView& scales,
                                      const TensorView& w, cudaStream_t stream);
void dequantize_mxfp8(const TensorView& q, const TensorView& scales, const TensorView& x,
                      cudaStream_t stream);
void dequantize_nvfp4(const TensorView& q, const TensorView& block_scales,
                      const TensorView& tensor_scale, const TensorView& x, cudaStream_t stream);

// MXFP8 quantise-dequantise: out = bf16(dequantize_mxfp8(quantize_mxfp8(x))) in one pass, with
// no codes or scales stored: the operands of a BF16 GEMM that emulates an MXFP8 one, quantised
// along that GEMM's K. The values equal ref::qdq_mxfp8_* (src/ref/quant.h) rounded to bf16 (to
// nearest even), bit for bit, NaN as NaN: each is an E4M3 value (4 significant bits) times a power
// of two, so the rounding is exact but for bf16 subnormals (below 2^-130). A block holding an Inf
// keeps it and gets the largest scale, 2^127 (its finite elements below 2^117 become zeros), as
// in the reference. x and out bf16, contiguous, 16-byte aligned; out may be x (in place, the
// same data pointer) and must not otherwise overlap it. M = 0 is a no-op. Capturable like the
// calls above.
// Rows: x, out [M, K], K % 32 == 0; blocks of 32 consecutive elements of a row, as quantize_mxfp8.
void qdq_mxfp8_rows(const TensorView& x, const TensorView& out, cudaStream_t stream);
// Columns: x, out [M, N], N % 8 == 0, M below 2^31; blocks of 32 consecutive rows of one column.
// offsets int32 [E+1], 1 <= E <= kGroupedGemmMaxExperts (moefuse/grouped_gemm.h), is read on the
// device only; the caller keeps offsets[0] >= 0, non-decreasing and offsets[E] <= M (values that
// break this never make the pass touch memory outside x and out). Expert e's blocks start at its
// first row: block b covers rows offsets[e] + 32b .. min(+32, offsets[e+1]), so its last may be
// short; rows outside [offsets[0], offsets[E]) are not written. Or offsets absent (TensorView{}):
// blocks of 32 rows from row 0, M % 32 == 0 (stacked weights [E * N_rows, K], N_rows % 32 == 0).
void qdq_mxfp8_cols(const TensorView& x, const TensorView& offsets, const TensorView& out,
                    cudaStream_t stream);

// MXFP8 column layout: the operands of the MXFP8 backward GEMMs whose K runs down the rows
// (moefuse/grouped_gemm_mxfp8_backward.h): a wgrad's, whose K is an expert's rows, and the
// dgrads' weights [E, K, N] (viewed as [E·K, N]). Blocks of 32 consecutive rows of one column,
// qdq_mxfp8_cols's blocks; the codes stay in x's places (nothing is transposed, as Transformer
// Engine keeps its MXFP8 column-wise data):
//   x       [M, N]                          bf16, N % 8 == 0, M below 2^31
//   q       [M, N]                          e4m3 out
//   scales  [mxfp8_col_blocks(M, E), N]     e8m0 out; row g holds block g's 32-row scales
// Blocks are numbered expert by expert: expert e's b-th block is g = block_start[e] + b, with
// block_start[e] = the sum of ceil(m_e' / 32) over e' < e (computed on the device from offsets,
// int32 [E + 1], 1 <= E <= kGroupedGemmMaxExperts, the contract of qdq_mxfp8_cols). Without
// offsets (TensorView{}; E = 0) block g is rows 32g .. 32g + 31 and M % 32 == 0. Rows of q outside
// [offsets[0], offsets[E]) and scale rows at or past the device's block count are not written.
// Bit-exact with ref::quantize_mxfp8_cols; asynchronous, capturable, allocates nothing.
constexpr int64_t mxfp8_col_blocks(int64_t rows, int64_t experts) {
  return experts > 0 ? (rows + 31 * experts) / 32 : rows / 32;  // sum of ceil(m_e / 32) at most
}
void quantize_mxfp8_cols(const TensorView& x, const TensorView& offsets, const TensorView& q,
                         const TensorView& scales, cudaStream_t stream);

}  // namespace moefuse
