// The 128-byte swizzle that TMA writes and wgmma reads every operand stage in: hardware facts
// shared by all GEMM kernels.
#pragma once

namespace moefuse::gemm {

inline constexpr int kSwizzleRowBytes = 128;   // one swizzled row: 64 bf16 or 128 e4m3
inline constexpr int kSwizzleAtomBytes = 1024;  // 8 rows × 128 B; stage bases align to it

}  // namespace moefuse::gemm
