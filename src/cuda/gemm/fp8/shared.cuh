// The FP8 kernel's shared memory: where each stage, barrier and the tile prefix live, and the
// wgmma descriptor of a K-major, 128B-swizzled e4m3 stage.
#pragma once

#include <cstdint>

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
    // TMA's 128B swizzle and the wgmma descriptors assume 1024-byte-aligned stage bases.
    uint8_t* base = reinterpret_cast<uint8_t*>(
        (reinterpret_cast<uintptr_t>(raw) + kSwizzleAtomBytes - 1) &
        ~uintptr_t{kSwizzleAtomBytes - 1});
    SharedLayout s;
    s.a = base;
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

// wgmma descriptor of a K-major, 128B-swizzled operand whose 8-row swizzle atoms are 1024 bytes
// apart (PTX ISA "matrix descriptor"): start address >> 4 in bits 0-13, leading byte offset
// (unused for swizzled K-major; 1 by convention) in 16-29, stride byte offset 1024 >> 4 in
// 32-45, base offset 0 (atom-aligned) in 49-51, layout type 1 = SWIZZLE_128B in 62-63.
// One k32 step of e4m3 is 32 bytes along the 128-byte row: +2 on the start-address field.
__device__ __forceinline__ uint64_t smem_descriptor(const void* smem) {
  const uint32_t addr = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
  return uint64_t{(addr & 0x3FFFFu) >> 4} | (uint64_t{1} << 16) |
         (uint64_t{kSwizzleAtomBytes >> 4} << 32) | (uint64_t{1} << 62);
}

}  // namespace moefuse::gemm::fp8
