// Blockwise FP8 quantisation of weights in 128x128 blocks: one CTA per block (grid: K blocks,
// N blocks, experts). 256 threads: 8 lanes of 16 elements cover a block row, 32 rows per pass,
// 4 passes. All 4 loads of a thread are issued first and the block stays in registers as loaded
// (32 words a thread for bf16, 64 for fp32) between the amax and the encode, so a CTA has the
// whole block (32 or 64 KB) in flight and ~4 CTAs an SM overlap their load, reduce and store
// phases.
#pragma once

#include <cstdint>

#include "cuda/quant/vec16.cuh"
#include "formats/recipes.h"

namespace moefuse::cuda::quant {

struct BlockQuantParams {
  const void* w = nullptr;  // [E, N, K] bf16 or fp32
  uint8_t* q = nullptr;     // [E, N, K] e4m3
  float* scales = nullptr;  // [E, ceil(N/128), ceil(K/128)]
  int64_t rows = 0, cols = 0;  // N, K
};

inline constexpr int kBlocksThreads = 256;
inline constexpr int kBlockEdge = formats::kBlockwiseGroup;
inline constexpr int kLanesPerBlockRow = kBlockEdge / kVec;                  // 8
inline constexpr int kRowsPerPass = kBlocksThreads / kLanesPerBlockRow;      // 32
inline constexpr int kPasses = kBlockEdge / kRowsPerPass;                    // 4
static_assert(kPasses * kRowsPerPass == kBlockEdge && kBlocksThreads % 32 == 0);

template <class T>
__global__ void __launch_bounds__(kBlocksThreads) quantize_blocks_kernel(BlockQuantParams p) {
  __shared__ float warp_amax[kBlocksThreads / 32];
  const int64_t col = int64_t(blockIdx.x) * kBlockEdge + (threadIdx.x % kLanesPerBlockRow) * kVec;
  const int64_t row0 = int64_t(blockIdx.y) * kBlockEdge + threadIdx.x / kLanesPerBlockRow;
  const T* w = static_cast<const T*>(p.w) + int64_t(blockIdx.z) * p.rows * p.cols;
  Raw16<T> v[kPasses];
#pragma unroll
  for (int pass = 0; pass < kPasses; ++pass) {
    const int64_t row = row0 + pass * kRowsPerPass;
    if (row < p.rows && col < p.cols)
      load16(w + row * p.cols + col, v[pass]);
    else
      zero16(v[pass]);
  }
  float a = 0.0f;
#pragma unroll
  for (int pass = 0; pass < kPasses; ++pass) a = fmaxf(a, amax16(v[pass]));
  a = group_max<32>(a);
  if (threadIdx.x % 32 == 0) warp_amax[threadIdx.x / 32] = a;
  __syncthreads();
#pragma unroll
  for (int i = 0; i < kBlocksThreads / 32; ++i) a = fmaxf(a, warp_amax[i]);
  const formats::BlockwiseScale s = formats::blockwise_scale(a);
  if (threadIdx.x == 0)
    p.scales[(int64_t(blockIdx.z) * gridDim.y + blockIdx.y) * gridDim.x + blockIdx.x] = s.scale;
  uint8_t* q = p.q + int64_t(blockIdx.z) * p.rows * p.cols;
#pragma unroll
  for (int pass = 0; pass < kPasses; ++pass) {
    const int64_t row = row0 + pass * kRowsPerPass;
    if (row < p.rows && col < p.cols) store16_e4m3(q + row * p.cols + col, v[pass], s.multiplier);
  }
}

}  // namespace moefuse::cuda::quant
