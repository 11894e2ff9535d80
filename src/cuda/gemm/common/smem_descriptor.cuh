// wgmma shared-memory matrix descriptors of 128B-swizzled operand stages, and the alignment of
// the stage base they assume.
#pragma once

#include <cstdint>

#include "cuda/gemm/common/swizzle.h"

namespace moefuse::gemm {

// The first swizzle-atom boundary at or after `raw`: TMA's 128B swizzle and the descriptors
// below assume 1024-byte-aligned stage bases (base offset 0).
__device__ __forceinline__ uint8_t* align_to_swizzle_atom(uint8_t* raw) {
  return reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(raw) + kSwizzleAtomBytes - 1) &
                                    ~uintptr_t{kSwizzleAtomBytes - 1});
}

// PTX ISA "matrix descriptor": start address >> 4 in bits 0-13, leading byte offset >> 4 in
// 16-29, stride byte offset >> 4 in 32-45, base offset 0 (atom-aligned) in 49-51, layout type
// 1 = SWIZZLE_128B in 62-63.
__device__ __forceinline__ uint64_t sw128_descriptor(const void* smem, uint32_t lbo, uint32_t sbo) {
  const uint32_t addr = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
  return uint64_t{(addr & 0x3FFFFu) >> 4} | (uint64_t{lbo >> 4} << 16) |
         (uint64_t{sbo >> 4} << 32) | (uint64_t{1} << 62);
}

// A K-major operand whose 8-row swizzle atoms are 1024 bytes apart: LBO unused for swizzled
// K-major (16, i.e. 1, by convention), SBO one atom. Advancing K by 32 bytes inside the 128-byte
// row (16 bf16 or 32 e4m3: one wgmma K step) is +2 on the start-address field: the hardware
// applies the swizzle to the final address.
__device__ __forceinline__ uint64_t smem_descriptor(const void* smem) {
  return sw128_descriptor(smem, 16, kSwizzleAtomBytes);
}

}  // namespace moefuse::gemm
