// The wgmma pieces shared by the bf16 kernels (forward and backward) and the accumulator fence
// of every kernel.
#pragma once

#include <cute/arch/mma_sm90_gmma.hpp>

#include <cstddef>
#include <cstdint>
#include <utility>

namespace moefuse::gemm {

using Major = cute::SM90::GMMA::Major;

// The bf16 → fp32 wgmma of a 64-row slab and an N-column stage, K = 16 (N / 2 accumulators a
// thread): N = 256 for every kernel but the FC2 dgrad's dGLU (192, backward/config.h).
template <int N, Major kA, Major kB>
struct WgmmaBf16;
template <Major kA, Major kB>
struct WgmmaBf16<256, kA, kB> {
  using Mma = cute::SM90::GMMA::MMA_64x256x16_F32BF16BF16_SS<kA, kB>;
};
template <Major kA, Major kB>
struct WgmmaBf16<192, kA, kB> {
  using Mma = cute::SM90::GMMA::MMA_64x192x16_F32BF16BF16_SS<kA, kB>;
};

// acc += A_slab · B_stage.
template <int N, Major kA, Major kB, size_t... I>
__device__ __forceinline__ void wgmma_m64k16(uint64_t desc_a, uint64_t desc_b, float (&acc)[N / 2],
                                             std::index_sequence<I...>) {
  WgmmaBf16<N, kA, kB>::Mma::fma(desc_a, desc_b, acc[I]..., cute::SM90::GMMA::ScaleOut::One);
}

// Keeps the compiler from moving accumulator reads or writes across a wgmma fence point.
template <int N>
__device__ __forceinline__ void fence_accumulators(float (&acc)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) cute::warpgroup_fence_operand(acc[i]);
}

}  // namespace moefuse::gemm
