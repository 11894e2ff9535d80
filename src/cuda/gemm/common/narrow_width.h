// Where the bf16 kernels run 128 × 192 tiles instead of 128 × 256: where 192 divides N and 256
// does not. gpt-oss's N of 2880 = 15 × 192 and 5760 = 30 × 192 leave 256-wide tiles a 64- or
// 128-column tail computed over zeros (6.7% and 2.2% of the tensor work); no other preset has
// such an N. One rule for the forward (config.h) and the backward's plain dgrad (backward/
// config.h); the TMA wgrad's fp32 tiles go narrow wherever 192 divides N (wgrad_narrow there).
#pragma once

#include <cstdint>

namespace moefuse::gemm {

inline constexpr int kWideBlockN = 256;
inline constexpr int kNarrowBlockN = 192;
constexpr bool narrow_width(int64_t n) { return n % kWideBlockN != 0 && n % kNarrowBlockN == 0; }

}  // namespace moefuse::gemm
