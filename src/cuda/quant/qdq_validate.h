// Argument checks of the MXFP8 quantise-dequantise passes and of the MXFP8 column layout
// (moefuse/quant.h), shared by the GPU entry points (bf16, Device::kCuda, 16-byte-aligned data)
// and the CPU references (src/ref/quant.h: fp32, Device::kCpu), so both reject the same calls.
// The offsets' values are the caller's to check: the reference reads them on the host, the GPU
// pass never does.
#pragma once

#include <cstdint>
#include <string_view>
#include <utility>

#include "moefuse/tensor.h"

namespace moefuse {

// x and out [M, K] of `dtype` on `device`, K % 32 == 0, out == x (in place) or disjoint from it.
// Returns {M, K}.
std::pair<int64_t, int64_t> validate_qdq_mxfp8_rows(const TensorView& x, const TensorView& out,
                                                    DType dtype, Device device);

// x and out [M, N] of `dtype` on `device`, N % 8 == 0, M below 2^31, out == x or disjoint from
// it; offsets int32 [E + 1] on `device` with 1 <= E <= kGroupedGemmMaxExperts, disjoint from
// out, or absent (TensorView{}) with M % 32 == 0. Returns E, 0 when offsets is absent.
int64_t validate_qdq_mxfp8_cols(const TensorView& x, const TensorView& offsets,
                                const TensorView& out, DType dtype, Device device);

// Which way a call converts between the plain tensor and the MXFP8 column layout: the plain one
// is read (quantise) or written (dequantise).
enum class Mxfp8ColsDirection { kQuantize, kDequantize };

// The MXFP8 column layout (quantize_mxfp8_cols): `plain` [M, N] of `dtype` on `device` (named
// `plain_name`), N % 8 == 0, M below 2^31; q [M, N] e4m3; scales [mxfp8_col_blocks(M, E), N]
// e8m0; offsets as validate_qdq_mxfp8_cols's. The outputs (q and scales, or plain) overlap no
// other tensor. Returns E, 0 when offsets is absent.
int64_t validate_mxfp8_cols(const TensorView& plain, std::string_view plain_name, DType dtype,
                            const TensorView& offsets, const TensorView& q,
                            const TensorView& scales, Device device,
                            Mxfp8ColsDirection direction);

}  // namespace moefuse
