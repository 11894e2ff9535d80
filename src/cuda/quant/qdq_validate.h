// Argument checks of the MXFP8 quantise-dequantise passes (moefuse/quant.h), shared by the GPU
// entry points (bf16, Device::kCuda, 16-byte-aligned data) and the CPU references (src/ref/quant.h:
// fp32, Device::kCpu), so both reject the same calls. The offsets' values are the caller's to
// check: the reference reads them on the host, the GPU pass never does.
#pragma once

#include <cstdint>
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

}  // namespace moefuse
