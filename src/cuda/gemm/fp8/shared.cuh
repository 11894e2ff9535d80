// The FP8 kernel's shared memory: where each stage, barrier and the tile prefix live. Its stages
// are K-major, 128B-swizzled e4m3 (wgmma descriptors: common/smem_descriptor.cuh).
#pragma once

#include <cstdint>

#include "cuda/gemm/common/smem_descriptor.cuh"
#include "cuda/gemm/fp8/config.h"

namespace moefuse::gemm::fp8 {

struct SharedLayout {
  uint8_t* a;       // kStages × [kBlockM rows × 128 B], 128B-swizzled
  uint8_t* b;       // kStages × [kBlockN rows × 128 B], 128B-swizzled
  float* a_scale;   // kStages × [kBlockM]: the tile rows' activation scales of the stage's K group
  uint64_t* full;   // [kStages] producer → consumers: the stage holds data
  uint64_t* empty;  // [kStages] consumers → producer: the stage may be overwritten
  int* tile_start;  // [E + 1] exclusive prefix of the tile counts

  __device__ static SharedLayout carve(uint8_t* raw) {
    SharedLayout s;
    s.a = align_to_swizzle_atom(raw);
    s.b = s.a + kStages * kABytes;
    s.a_scale = reinterpret_cast<float*>(s.b + kStages * kBBytes);
    s.full = reinterpret_cast<uint64_t*>(s.a_scale + kStages * kBlockM);
    s.empty = s.full + kStages;
    s.tile_start = reinterpret_cast<int*>(s.empty + kStages);
    return s;
  }
  __device__ uint8_t* a_stage(int stage) const { return a + stage * kABytes; }
  __device__ uint8_t* b_stage(int stage) const { return b + stage * kBBytes; }
  __device__ float* scale_stage(int stage) const { return a_scale + stage * kBlockM; }
};

}  // namespace moefuse::gemm::fp8
