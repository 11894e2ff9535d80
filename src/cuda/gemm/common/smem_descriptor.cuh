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

// Tells the compiler that `p`, a pointer carved from align_to_swizzle_atom's result, points to
// shared memory: the integer round trip above loses the address space, and without this every
// access through the pointer is a generic LD.E/ST.E instead of LDS/STS (run 18's SASS; run 19:
// the GEMMs 0-7% faster, qwen3's fused FC2 dgrad most). Said per use, at the hand-off and
// staging buffers, not in align_to_swizzle_atom itself: there it made the TMA wgrad's epilogue
// spill (run 18).
__device__ __forceinline__ void assume_shared(const void* p) { __builtin_assume(__isShared(p)); }

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

// smem_descriptor from the low 32-bit word of a stage base, for loops that step through stages:
// a stage moves only the start-address field, and shared addresses stay below 2^18, so adding
// (byte offset >> 4) to the low word never carries into the LBO field and gives the same 64 bits
// as smem_descriptor of the moved address — without the 64-bit arithmetic, generic-address
// conversion and register moves that recomputing it per stage costs (FP8 kernel, run 9's SASS).
// The K steps inside a stage stay 64-bit adds of +2 to the whole descriptor: in uniform
// registers ptxas emits one UIADD3.64 per descriptor for them, where 32-bit adds of the low word
// made it re-set the high word before every wgmma (two more instructions each, measured).
inline constexpr uint32_t kSw128DescriptorHigh =
    static_cast<uint32_t>(kSwizzleAtomBytes >> 4) | (1u << 30);
static_assert(uint64_t{kSw128DescriptorHigh} << 32 ==
                  (uint64_t{kSwizzleAtomBytes >> 4} << 32 | uint64_t{1} << 62),
              "sw128_descriptor's SBO and layout type");
static_assert(228 * 1024 <= (1 << 18), "a CTA's shared addresses fit the 18 address bits");
__device__ __forceinline__ uint32_t sw128_descriptor_low(uint32_t smem_addr) {
  return ((smem_addr & 0x3FFFFu) >> 4) | (uint32_t{16 >> 4} << 16);
}
__device__ __forceinline__ uint64_t sw128_descriptor_of(uint32_t low) {
  return uint64_t{kSw128DescriptorHigh} << 32 | low;
}

}  // namespace moefuse::gemm
