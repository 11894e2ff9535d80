// Dequantisation of every recipe: each thread turns 16 codes into 16 fp32 values. The scale of
// element (row, col) of a [batches * batch_rows, cols] tensor sits at
//   ((row / batch_rows) * scale_rows + (row % batch_rows) / row_group) * scale_cols + col / col_group
// which covers 1xG groups (batch_rows = rows, row_group = 1) and 128x128 blocks of stacked weights.
#pragma once

#include <cstdint>

#include "cuda/quant/vec16.cuh"
#include "formats/recipes.h"

namespace moefuse::cuda::quant {

enum class ScaleKind { kFp32, kUE8M0, kNvfp4 };

struct DequantParams {
  const uint8_t* q = nullptr;
  const void* scales = nullptr;
  const float* tensor_scale = nullptr;  // NVFP4 only
  float* x = nullptr;
  int64_t rows = 0, cols = 0;
  int64_t batch_rows = 0, row_group = 1, col_group = 0, scale_rows = 0, scale_cols = 0;
};

inline constexpr int kDequantThreads = 256;

template <ScaleKind kKind>
__global__ void __launch_bounds__(kDequantThreads) dequantize_kernel(DequantParams p) {
  const int64_t e0 = (blockIdx.x * int64_t(kDequantThreads) + threadIdx.x) * kVec;
  if (e0 >= p.rows * p.cols) return;
  const int64_t row = e0 / p.cols, col = e0 % p.cols;
  const int64_t s = ((row / p.batch_rows) * p.scale_rows + (row % p.batch_rows) / p.row_group) *
                        p.scale_cols + col / p.col_group;
  float v[kVec];
  if constexpr (kKind == ScaleKind::kNvfp4) {
    const uint2 u = *reinterpret_cast<const uint2*>(p.q + e0 / 2);
    const uint8_t block = static_cast<const uint8_t*>(p.scales)[s];
    const float ts = *p.tensor_scale;
    const uint32_t w[2] = {u.x, u.y};
#pragma unroll
    for (int k = 0; k < kVec; ++k)
      v[k] = formats::nvfp4_dequant(uint8_t((w[k / 8] >> (4 * (k % 8))) & 0xFu), block, ts);
  } else {
    const uint4 u = *reinterpret_cast<const uint4*>(p.q + e0);
    const uint32_t w[4] = {u.x, u.y, u.z, u.w};
    const float scale = kKind == ScaleKind::kFp32
                            ? static_cast<const float*>(p.scales)[s]
                            : formats::ue8m0_to_float(static_cast<const uint8_t*>(p.scales)[s]);
#pragma unroll
    for (int k = 0; k < kVec; ++k)
      v[k] = formats::e4m3_to_float(uint8_t(w[k / 4] >> (8 * (k % 4)))) * scale;
  }
  store16(p.x + e0, v);
}

}  // namespace moefuse::cuda::quant
