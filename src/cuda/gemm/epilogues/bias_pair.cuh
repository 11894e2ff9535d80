// The bias of a thread's accumulator column pair (columns col, col + 1 of h; the wgmma
// accumulator layout gives each thread adjacent column pairs): zeros without a bias or past N.
#pragma once

namespace moefuse::gemm {

__device__ __forceinline__ float2 bias_pair(const float* bias, int col, int n) {
  return bias && col < n ? __ldg(reinterpret_cast<const float2*>(bias + col)) : float2{0, 0};
}

// The bias columns [n0, min(n0 + kCols, n)) into L1 ahead of a tile's bias_pair loads: one
// 128-byte line a lane, kCols · 4 / 128 lines and one more for a row not aligned to them.
template <int kCols>
__device__ __forceinline__ void prefetch_bias_l1(const float* bias, int n0, int n) {
  constexpr int kLines = kCols * 4 / 128;
  const int lane = threadIdx.x % 32;
  if (lane > kLines) return;
  const int col = min(n0 + min(lane * 32, kCols - 1), n - 1);
  asm volatile("prefetch.global.L1 [%0];" ::"l"(bias + col));
}

}  // namespace moefuse::gemm
