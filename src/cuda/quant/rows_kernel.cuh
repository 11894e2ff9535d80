// Quantisation in 1xG groups along each row (blockwise 1x128, MXFP8 1x32, NVFP4 1x16).
//
// Mapping: each thread owns 16 consecutive elements of a row; a row gets `lanes_per_row` threads,
// ceil(K / G) * G / 16, so that every group starts on a lane multiple of G / 16 and the G / 16
// lanes of a group sit in one warp (G / 16 in {8, 2, 1} divides 32). Lanes past the row's end
// (the short last group) load nothing but still join the group's shuffle. The group amax is an
// integer max over |x| bits (formats/recipes.h), reduced with shuffles; the group's first lane
// stores its scale.
#pragma once

#include <cstdint>

#include "cuda/quant/vec16.cuh"
#include "formats/recipes.h"

namespace moefuse::cuda::quant {

struct RowQuantParams {
  const void* x = nullptr;     // [rows, cols] bf16 or fp32
  uint8_t* q = nullptr;        // e4m3 [rows, cols] or packed e2m1
  void* scales = nullptr;      // [rows, groups_per_row]
  const float* amax = nullptr;       // NVFP4: tensor amax, written by amax_kernel
  float* tensor_scale = nullptr;     // NVFP4: decode scale out
  int64_t rows = 0, cols = 0, groups_per_row = 0, lanes_per_row = 0;
};

struct BlockwiseRecipe {
  static constexpr int kGroup = formats::kBlockwiseGroup;
  static constexpr bool kFp4 = false;
  __device__ static float prepare(float amax, const RowQuantParams& p, int64_t s, bool leader) {
    const formats::BlockwiseScale b = formats::blockwise_scale(amax);
    if (leader) static_cast<float*>(p.scales)[s] = b.scale;
    return b.multiplier;
  }
};

struct MxRecipe {
  static constexpr int kGroup = formats::kMxBlock;
  static constexpr bool kFp4 = false;
  __device__ static float prepare(float amax, const RowQuantParams& p, int64_t s, bool leader) {
    const uint8_t code = formats::mx_scale_code(amax);
    if (leader) static_cast<uint8_t*>(p.scales)[s] = code;
    return formats::ue8m0_reciprocal(code);
  }
};

struct Nvfp4Recipe {
  static constexpr int kGroup = formats::kNvfp4Block;
  static constexpr bool kFp4 = true;
  __device__ static float prepare(float amax, const RowQuantParams& p, int64_t s, bool leader) {
    const float encode = formats::nvfp4_tensor_encode_scale(*p.amax);
    const uint8_t code = formats::nvfp4_block_scale_code(amax, encode);
    if (leader) static_cast<uint8_t*>(p.scales)[s] = code;
    return formats::nvfp4_value_multiplier(code, formats::nvfp4_tensor_scale(encode));
  }
};

inline constexpr int kRowsThreads = 256;

template <class T, class Recipe>
__global__ void __launch_bounds__(kRowsThreads) quantize_rows_kernel(RowQuantParams p) {
  constexpr int kLanes = Recipe::kGroup / kVec;
  const int64_t t = blockIdx.x * int64_t(kRowsThreads) + threadIdx.x;
  if constexpr (Recipe::kFp4) {
    if (t == 0)
      *p.tensor_scale = formats::nvfp4_tensor_scale(formats::nvfp4_tensor_encode_scale(*p.amax));
  }
  const int64_t row = t / p.lanes_per_row;
  const int64_t col = (t % p.lanes_per_row) * kVec;
  const bool active = row < p.rows && col < p.cols;
  float v[kVec];
  uint32_t amax = 0;
  if (active) {
    load16(static_cast<const T*>(p.x) + row * p.cols + col, v);
    amax = amax16(v);
  }
  amax = group_max<kLanes>(amax);
  if (!active) return;
  const float multiplier = Recipe::prepare(formats::bits_float(amax), p,
                                           row * p.groups_per_row + col / Recipe::kGroup,
                                           col % Recipe::kGroup == 0);
  if constexpr (Recipe::kFp4)
    store16_e2m1(p.q + (row * p.cols + col) / 2, v, multiplier);
  else
    store16_e4m3(p.q + row * p.cols + col, v, multiplier);
}

// NVFP4's first pass: max |x| over the tensor into *amax_bits (zeroed before), as fp32 bits.
template <class T>
__global__ void __launch_bounds__(kRowsThreads) amax_kernel(const T* x, int64_t vectors,
                                                            uint32_t* amax_bits) {
  uint32_t a = 0;
  for (int64_t i = blockIdx.x * int64_t(kRowsThreads) + threadIdx.x; i < vectors;
       i += int64_t(gridDim.x) * kRowsThreads) {
    float v[kVec];
    load16(x + i * kVec, v);
    a = formats::max_bits(a, amax16(v));
  }
  a = group_max<32>(a);
  if (threadIdx.x % 32 == 0 && a != 0) atomicMax(amax_bits, a);
}

}  // namespace moefuse::cuda::quant
