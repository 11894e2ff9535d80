// Dequantisation of every recipe to fp32. The tensor is [batches * batch_rows, cols]; the scale
// of element (row, col) sits at
//   ((row / batch_rows) * scale_rows + (row % batch_rows) / row_group) * scale_cols + col / G
// which covers 1xG groups (batch_rows = rows, row_group = 1) and 128x128 blocks of stacked
// weights. G is fixed by the scale kind (128 fp32, 32 UE8M0, 16 NVFP4).
//
// Mapping: a warp owns a row at a time (the scale row is computed once per row); lane l decodes
// the 4-element vectors l, l + 32, ..., kDequantSteps of them per step with all code loads issued
// first, so each store instruction of the warp writes 512 contiguous bytes (32 float4) and each
// load reads 128 (64 for E2M1). Run 9 measured the first mapping, 16-element vectors a lane (as
// the quantisers read), at 0.30-0.44 of copy: each of its store instructions wrote 16 of every
// 64 bytes it spanned, half of every other sector, and the writes are four fifths of the traffic.
// The scales are loaded with the codes, before any store: a scale read after a float4 store to x
// (which it could alias, as far as the compiler knows) waits out its latency before the next
// store; run 12 measured 0.74-0.76 of copy for the fp32-scale kinds that way (MXFP8 0.87).
// E4M3 decodes in hardware (cvt to f16x2, exact: every E4M3 value is an fp16 value; NaN stays
// NaN); E2M1 through a 16-entry table in shared memory built from formats::e2m1_to_float.
// Products are formed in the reference's order, so results are equal.
#pragma once

#include <cstdint>
#include <type_traits>

#include "cuda/quant/vec16.cuh"
#include "formats/recipes.h"

namespace moefuse::cuda::quant {

enum class ScaleKind { kFp32, kUE8M0, kNvfp4 };

template <ScaleKind kKind>
inline constexpr int kDequantGroup = kKind == ScaleKind::kFp32    ? formats::kBlockwiseGroup
                                     : kKind == ScaleKind::kUE8M0 ? formats::kMxBlock
                                                                  : formats::kNvfp4Block;

struct DequantParams {
  const uint8_t* q = nullptr;
  const void* scales = nullptr;
  const float* tensor_scale = nullptr;  // NVFP4 only
  float* x = nullptr;
  int64_t rows = 0, cols = 0;
  int64_t batch_rows = 0, row_group = 1, scale_rows = 0, scale_cols = 0;
};

inline constexpr int kDequantThreads = 256;
inline constexpr int kDequantWarps = kDequantThreads / 32;
inline constexpr int kDequantVec = 4;     // elements a lane converts at once: one float4 store
inline constexpr int kDequantSteps = 16;  // vectors a lane has in flight: 64 bytes of E4M3 codes
static_assert(kVec % kDequantVec == 0, "a vector never straddles a scale group (>= 16)");

template <ScaleKind kKind>
__global__ void __launch_bounds__(kDequantThreads) dequantize_kernel(DequantParams p) {
  constexpr bool kFp4 = kKind == ScaleKind::kNvfp4;
  constexpr int kGroup = kDequantGroup<kKind>;
  using Codes = std::conditional_t<kFp4, uint16_t, uint32_t>;  // 4 codes
  using ScaleCode = std::conditional_t<kKind == ScaleKind::kFp32, float, uint8_t>;
  constexpr int64_t kStepCols = 32 * kDequantSteps * kDequantVec;
  __shared__ float e2m1_value[16];
  if constexpr (kFp4) {
    if (threadIdx.x < 16) e2m1_value[threadIdx.x] = formats::e2m1_to_float(uint8_t(threadIdx.x));
    __syncthreads();
  }
  const float tensor_scale = kFp4 ? *p.tensor_scale : 1.0f;
  const int lane = threadIdx.x % 32;
  const int64_t warps = int64_t(gridDim.x) * kDequantWarps;
  for (int64_t row = blockIdx.x * int64_t(kDequantWarps) + threadIdx.x / 32; row < p.rows;
       row += warps) {
    const int64_t scale_row =
        (row / p.batch_rows) * p.scale_rows + (row % p.batch_rows) / p.row_group;
    const uint8_t* q = p.q + (kFp4 ? row * p.cols / 2 : row * p.cols);
    for (int64_t col0 = 0; col0 < p.cols; col0 += kStepCols) {
      Codes c[kDequantSteps];
      ScaleCode sc[kDequantSteps];
#pragma unroll
      for (int u = 0; u < kDequantSteps; ++u) {
        const int64_t col = col0 + (u * 32 + lane) * kDequantVec;
        if (col >= p.cols) continue;
        c[u] = __ldg(reinterpret_cast<const Codes*>(q + (kFp4 ? col / 2 : col)));
        sc[u] = __ldg(static_cast<const ScaleCode*>(p.scales) + scale_row * p.scale_cols +
                      col / kGroup);
      }
#pragma unroll
      for (int u = 0; u < kDequantSteps; ++u) {
        const int64_t col = col0 + (u * 32 + lane) * kDequantVec;
        if (col >= p.cols) continue;
        float v[kDequantVec];
        if constexpr (kFp4) {
          const float block = formats::e4m3_to_float(sc[u]);
#pragma unroll
          for (int k = 0; k < kDequantVec; ++k)
            v[k] = e2m1_value[(c[u] >> (4 * k)) & 0xFu] * block * tensor_scale;
        } else {
          float scale;
          if constexpr (kKind == ScaleKind::kFp32)
            scale = sc[u];
          else
            scale = formats::ue8m0_to_float(sc[u]);
          e4m3x4_to_float(c[u], v);
#pragma unroll
          for (int k = 0; k < kDequantVec; ++k) v[k] *= scale;
        }
        *reinterpret_cast<float4*>(p.x + row * p.cols + col) = make_float4(v[0], v[1], v[2], v[3]);
      }
    }
  }
}

}  // namespace moefuse::cuda::quant
