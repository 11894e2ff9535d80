// Quantisation in 1xG groups along each row (blockwise 1x128, MXFP8 1x32, NVFP4 1x16).
//
// Mapping: a warp owns a row at a time (rows strided over the grid's warps: row_launch.h sizes the
// grid); lane l handles the 16-element vectors l, l + 32, ..., kInFlight of them per step, all
// loads of a step issued before any arithmetic (128 bytes a lane in flight). A step covers
// 32 * kInFlight * 16 elements, a multiple of every G, so groups never straddle steps, and the
// G / 16 lanes of a group (8, 2, 1) are consecutive lanes of one warp. Vectors past the row's end
// (the short last group, the last step) load nothing and contribute 0 to their group's amax,
// which is reduced with G / 16 - 1 shuffles; the group's first lane stores the scale.
#pragma once

#include <cstdint>

#include "cuda/quant/vec16.cuh"
#include "formats/recipes.h"

namespace moefuse::cuda::quant {

struct RowQuantParams {
  const void* x = nullptr;     // [rows, cols] bf16 or fp32
  uint8_t* q = nullptr;        // e4m3 [rows, cols] or packed e2m1
  void* scales = nullptr;      // [rows, groups_per_row]
  const float* amax = nullptr;       // NVFP4: tensor amax, from amax_kernel or the caller
  float* tensor_scale = nullptr;     // NVFP4: decode scale out
  int64_t rows = 0, cols = 0, groups_per_row = 0;
};

inline constexpr int kRowsThreads = 256;
inline constexpr int kRowsWarps = kRowsThreads / 32;

// Each recipe: kGroup; State, what every thread needs of the tensor, made by setup(p), which all
// threads of the CTA call once (NVFP4's fills a shared table); prepare(), which turns a group
// amax into the value multiplier and has the group's leader store the scale.
struct BlockwiseRecipe {
  static constexpr int kGroup = formats::kBlockwiseGroup;
  static constexpr bool kFp4 = false;
  struct State {};
  __device__ static State setup(const RowQuantParams&) { return {}; }
  __device__ static float prepare(float amax, const State&, const RowQuantParams& p, int64_t s,
                                  bool leader) {
    const formats::BlockwiseScale b = formats::blockwise_scale(amax);
    if (leader) static_cast<float*>(p.scales)[s] = b.scale;
    return b.multiplier;
  }
};

struct MxRecipe {
  static constexpr int kGroup = formats::kMxBlock;
  static constexpr bool kFp4 = false;
  struct State {};
  __device__ static State setup(const RowQuantParams&) { return {}; }
  __device__ static float prepare(float amax, const State&, const RowQuantParams& p, int64_t s,
                                  bool leader) {
    const uint8_t code = formats::mx_scale_code(amax);
    if (leader) static_cast<uint8_t*>(p.scales)[s] = code;
    return formats::ue8m0_reciprocal(code);
  }
};

// NVFP4's block scale costs one conversion and one shared load a group, not a software E4M3
// encode and decode and an IEEE division (whose branches and compares were most of the integer
// work besides the E2M1 codes). The code comes from the hardware conversion, exact but for NaN,
// which block_amax * block_encode never is: the block amax is fmaxf's (>= +0, NaN skipped) and
// block_encode is positive and finite. Being >= +0, the code is at most 0x7E, and the multiplier
// is looked up in a table of formats::nvfp4_value_multiplier over the codes 0..127, which each
// CTA fills with the reference function itself.
inline constexpr int kNvfp4Codes = 128;

struct Nvfp4Recipe {
  static constexpr int kGroup = formats::kNvfp4Block;
  static constexpr bool kFp4 = true;
  struct State {
    float block_encode;
    const float* multipliers;  // shared, kNvfp4Codes
  };
  __device__ static State setup(const RowQuantParams& p) {
    static_assert(kRowsThreads >= kNvfp4Codes);
    __shared__ float multipliers[kNvfp4Codes];
    const float encode = formats::nvfp4_tensor_encode_scale(*p.amax);
    const float tensor_scale = formats::nvfp4_tensor_scale(encode);
    if (threadIdx.x < kNvfp4Codes)
      multipliers[threadIdx.x] = formats::nvfp4_value_multiplier(threadIdx.x, tensor_scale);
    if (blockIdx.x == 0 && threadIdx.x == 0) *p.tensor_scale = tensor_scale;
    __syncthreads();
    return {formats::nvfp4_block_encode(encode), multipliers};
  }
  __device__ static float prepare(float amax, const State& t, const RowQuantParams& p, int64_t s,
                                  bool leader) {
    const uint32_t code = e4m3_code(amax * t.block_encode);
    if (leader) static_cast<uint8_t*>(p.scales)[s] = code;
    return t.multipliers[code];
  }
};

template <class T, class Recipe>
__global__ void __launch_bounds__(kRowsThreads) quantize_rows_kernel(RowQuantParams p) {
  constexpr int kLanes = Recipe::kGroup / kVec;
  constexpr int kSteps = kInFlight<T>;
  constexpr int64_t kStepCols = 32 * kSteps * kVec;
  static_assert(kStepCols % Recipe::kGroup == 0 && 32 % kLanes == 0);
  const int lane = threadIdx.x % 32;
  const typename Recipe::State state = Recipe::setup(p);
  const int64_t warps = int64_t(gridDim.x) * kRowsWarps;
  for (int64_t row = blockIdx.x * int64_t(kRowsWarps) + threadIdx.x / 32; row < p.rows;
       row += warps) {
    const T* x = static_cast<const T*>(p.x) + row * p.cols;
    for (int64_t col0 = 0; col0 < p.cols; col0 += kStepCols) {
      Raw16<T> v[kSteps];
#pragma unroll
      for (int u = 0; u < kSteps; ++u) {
        const int64_t col = col0 + (u * 32 + lane) * kVec;
        if (col < p.cols)
          load16(x + col, v[u]);
        else
          zero16(v[u]);
      }
#pragma unroll
      for (int u = 0; u < kSteps; ++u) {
        const int64_t col = col0 + (u * 32 + lane) * kVec;
        const float amax = group_max<kLanes>(amax16(v[u]));
        if (col >= p.cols) continue;
        const float multiplier =
            Recipe::prepare(amax, state, p, row * p.groups_per_row + col / Recipe::kGroup,
                            col % Recipe::kGroup == 0);
        if constexpr (Recipe::kFp4)
          store16_e2m1(p.q + (row * p.cols + col) / 2, v[u], multiplier);
        else
          store16_e4m3(p.q + row * p.cols + col, v[u], multiplier);
      }
    }
  }
}

// NVFP4's first pass: max |x| over `vectors` 16-element vectors into *amax_bits (zeroed before),
// as fp32 bits (an integer atomicMax orders non-negative floats). Grid-stride, kInFlight vectors
// a thread per step, all loads issued first; one atomic per warp.
template <class T>
__global__ void __launch_bounds__(kRowsThreads) amax_kernel(const T* x, int64_t vectors,
                                                            uint32_t* amax_bits) {
  constexpr int kSteps = kInFlight<T>;
  const int64_t stride = int64_t(gridDim.x) * kRowsThreads;
  float a = 0.0f;
  for (int64_t i0 = blockIdx.x * int64_t(kRowsThreads) + threadIdx.x; i0 < vectors;
       i0 += stride * kSteps) {
    Raw16<T> v[kSteps];
#pragma unroll
    for (int u = 0; u < kSteps; ++u) {
      if (i0 + u * stride < vectors)
        load16(x + (i0 + u * stride) * kVec, v[u]);
      else
        zero16(v[u]);
    }
#pragma unroll
    for (int u = 0; u < kSteps; ++u) a = fmaxf(a, amax16(v[u]));
  }
  a = group_max<32>(a);
  if (threadIdx.x % 32 == 0 && a != 0.0f) atomicMax(amax_bits, formats::float_bits(a));
}

}  // namespace moefuse::cuda::quant
