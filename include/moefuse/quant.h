// GPU quantisation and dequantisation for the low-precision recipes (docs/formats.md): blockwise
// FP8 (1x128 activation groups, 128x128 weight blocks, fp32 scales), MXFP8 (1x32, UE8M0 scales)
// and NVFP4 (1x16, E4M3 block scales, fp32 tensor scale). Each output matches the CPU reference
// (src/ref/quant.h) bit for bit: both use the scalar codecs of src/formats/.
//
// All views are device tensors (Device::kCuda), contiguous, with 16-byte-aligned data, and K (the
// last extent) a multiple of 16. Inputs x / w are bf16 or fp32; dequantised outputs are fp32.
// Scale layouts are row-major, one entry per group (the last group of a row may be short):
//   1x128:   q [M, K] e4m3,  scales [M, ceil(K/128)] fp32
//   128x128: q [N, K] or [E, N, K] e4m3, scales [ceil(N/128), ceil(K/128)] (or [E, ...]) fp32
//   MXFP8:   q [M, K] e4m3,  scales [M, ceil(K/32)] e8m0
//   NVFP4:   q [M, K] e2m1 (two per byte, low nibble first), block_scales [M, ceil(K/16)] e4m3,
//            amax [1] fp32 (written: max |x|), tensor_scale [1] fp32 (written: decode scale)
//
// Every call enqueues on `stream` only, allocates nothing and never synchronises: all of them
// are CUDA-graph safe (NVFP4 quantise is a memset plus two kernels). Bad arguments throw
// moefuse::InvalidArgument naming the argument; launch failures throw moefuse::CudaError.
#pragma once

#include <cuda_runtime_api.h>

#include "moefuse/tensor.h"

namespace moefuse {

void quantize_fp8_blockwise_1x128(const TensorView& x, const TensorView& q,
                                  const TensorView& scales, cudaStream_t stream);
void quantize_fp8_blockwise_128x128(const TensorView& w, const TensorView& q,
                                    const TensorView& scales, cudaStream_t stream);
void quantize_mxfp8(const TensorView& x, const TensorView& q, const TensorView& scales,
                    cudaStream_t stream);
void quantize_nvfp4(const TensorView& x, const TensorView& q, const TensorView& block_scales,
                    const TensorView& amax, const TensorView& tensor_scale, cudaStream_t stream);

void dequantize_fp8_blockwise_1x128(const TensorView& q, const TensorView& scales,
                                    const TensorView& x, cudaStream_t stream);
void dequantize_fp8_blockwise_128x128(const TensorView& q, const TensorView& scales,
                                      const TensorView& w, cudaStream_t stream);
void dequantize_mxfp8(const TensorView& q, const TensorView& scales, const TensorView& x,
                      cudaStream_t stream);
void dequantize_nvfp4(const TensorView& q, const TensorView& block_scales,
                      const TensorView& tensor_scale, const TensorView& x, cudaStream_t stream);

}  // namespace moefuse
