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

// The scales of one step of a warp (kStepCols columns of a row): kStepScales<kKind> of them,
// lane l holding kLaneScales consecutive ones (fp32: one, lanes 0-15; byte codes: packed in a
// word, entry i in byte i). A lane's vector takes its scale from the holding lane by a shuffle:
// one coalesced load a step for the warp, one register a lane. (Run 12: a scale load per vector,
// issued with the codes, needed 80 registers and lost MXFP8 4% of its speed; loaded after the
// previous vector's store, which it could alias as far as the compiler knows, the fp32-scale kinds
// reached 0.74-0.76 of copy.)
inline constexpr int64_t kStepCols = 32 * kDequantSteps * kDequantVec;
template <ScaleKind kKind>
inline constexpr int kStepScales = static_cast<int>(kStepCols / kDequantGroup<kKind>);
template <ScaleKind kKind>
inline constexpr int kLaneScales = kStepScales<kKind> > 32 ? kStepScales<kKind> / 32 : 1;
static_assert(kLaneScales<ScaleKind::kNvfp4> <= 4 && kStepScales<ScaleKind::kFp32> <= 32,
              "a lane's scale codes fit one 32-bit register");

template <ScaleKind kKind>
using ScaleWord = std::conditional_t<kKind == ScaleKind::kFp32, float, uint32_t>;

// Lane `lane`'s share of the step's scales, from `row_scales` (the row's scale_cols entries,
// starting at the step's first group `first`); entries past the row's end are not read.
template <ScaleKind kKind>
__device__ __forceinline__ ScaleWord<kKind> load_step_scales(const void* row_scales,
                                                             int64_t first, int64_t count,
                                                             int lane) {
  const int64_t j = first + int64_t(lane) * kLaneScales<kKind>;
  if constexpr (kKind == ScaleKind::kFp32) {
    return j < count ? __ldg(static_cast<const float*>(row_scales) + j) : 0.0f;
  } else {
    const uint8_t* codes = static_cast<const uint8_t*>(row_scales);
    uint32_t word = 0;
#pragma unroll
    for (int i = 0; i < kLaneScales<kKind>; ++i)
      if (j + i < count) word |= uint32_t(__ldg(codes + j + i)) << (8 * i);
    return word;
  }
}

// The scale of vector u of lane `lane` in its step, as a float (before the tensor scale).
template <ScaleKind kKind>
__device__ __forceinline__ float step_scale(ScaleWord<kKind> held, int u, int lane) {
  const int j = (u * 32 + lane) * kDequantVec / kDequantGroup<kKind>;  // entry in the step
  const ScaleWord<kKind> word = __shfl_sync(0xffffffffu, held, j / kLaneScales<kKind>);
  if constexpr (kKind == ScaleKind::kFp32) {
    return word;
  } else {
    const auto code = static_cast<uint8_t>(word >> (8 * (j % kLaneScales<kKind>)));
    return kKind == ScaleKind::kUE8M0 ? formats::ue8m0_to_float(code)
                                      : formats::e4m3_to_float(code);
  }
}

// 4 CTAs an SM caps a thread at 64 registers (no spills). Run 12's sweep, of copy bandwidth:
// 1x128 / MXFP8 / NVFP4 / 128x128 0.87 / 0.87 / 0.83 / 0.88 at 4 CTAs, 0.84 / 0.84 / 0.81 / 0.86
// uncapped (73-88 registers, 2-3 CTAs), 0.81 / 0.82 / 0.78 / 0.83 at 5 CTAs (48 registers).
inline constexpr int kDequantCtasPerSm = 4;

template <ScaleKind kKind>
__global__ void __launch_bounds__(kDequantThreads, kDequantCtasPerSm)
    dequantize_kernel(DequantParams p) {
  constexpr bool kFp4 = kKind == ScaleKind::kNvfp4;
  using Codes = std::conditional_t<kFp4, uint16_t, uint32_t>;  // 4 codes
  constexpr int kScaleBytes = kKind == ScaleKind::kFp32 ? 4 : 1;
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
    const void* row_scales =
        static_cast<const uint8_t*>(p.scales) + scale_row * p.scale_cols * kScaleBytes;
    const uint8_t* q = p.q + (kFp4 ? row * p.cols / 2 : row * p.cols);
    for (int64_t col0 = 0; col0 < p.cols; col0 += kStepCols) {
      Codes c[kDequantSteps];
#pragma unroll
      for (int u = 0; u < kDequantSteps; ++u) {
        const int64_t col = col0 + (u * 32 + lane) * kDequantVec;
        if (col < p.cols) c[u] = __ldg(reinterpret_cast<const Codes*>(q + (kFp4 ? col / 2 : col)));
      }
      const ScaleWord<kKind> held = load_step_scales<kKind>(
          row_scales, col0 / kDequantGroup<kKind>, p.scale_cols, lane);
#pragma unroll
      for (int u = 0; u < kDequantSteps; ++u) {
        const int64_t col = col0 + (u * 32 + lane) * kDequantVec;
        const float scale = step_scale<kKind>(held, u, lane);  // every lane: a shuffle
        if (col >= p.cols) continue;
        float v[kDequantVec];
        if constexpr (kFp4) {
#pragma unroll
          for (int k = 0; k < kDequantVec; ++k)
            v[k] = e2m1_value[(c[u] >> (4 * k)) & 0xFu] * scale * tensor_scale;
        } else {
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
