// Tile geometry, pipeline depth, warp roles and register budgets of the FP8 grouped GEMM
// (DeepSeek-V3 recipe), with the shared-memory arithmetic checked at compile time.
#pragma once

#include <cstdint>

#include "cuda/gemm/common/swizzle.h"
#include "cuda/gemm/common/warp_roles.h"

namespace moefuse::gemm::fp8 {

inline constexpr int kBlockM = 128;  // rows per tile: 2 consumer warpgroups × 64
// 128 columns: one weight-scale block per tile, and the consumer holds two accumulator sets
// (the running fp32 sum and the current K block's wgmma output), 64 + 64 registers; N = 256
// would need 256 accumulator registers.
inline constexpr int kBlockN = 128;
inline constexpr int kBlockK = 128;  // 128 e4m3 = 128 bytes: one 128B-swizzle row, one scale group
inline constexpr int kWgmmaK = 32;   // wgmma m64n128k32 e4m3
inline constexpr int kStages = 6;
inline constexpr int kGroupM = 8;    // m-blocks per raster group (tile_scheduler.h)

// Warp roles (common/warp_roles.h): in warpgroup 0 one thread issues the TMA loads (no epilogue
// warps); warpgroups 1 and 2 consume and run the epilogue from registers.
//
// setmaxnreg budgets (common/warp_roles.h has the rule): 40 × 128 + 232 × 256 is exactly the
// CTA's 168 × 384.
inline constexpr int kProducerRegs = 40;
inline constexpr int kConsumerRegs = 232;
static_assert(fits_register_file(kProducerRegs, kConsumerRegs));

inline constexpr int kAccumulators = kBlockN / 2;      // fp32 per thread for m64n128
inline constexpr int kABytes = kBlockM * kBlockK;      // one stage of A, e4m3
inline constexpr int kBBytes = kBlockN * kBlockK;      // one stage of B
inline constexpr int kScaleBytes = kBlockM * 4;        // the tile rows' scales of one K group
inline constexpr int kStageBytes = kABytes + kBBytes + kScaleBytes;
static_assert(kBlockK == kSwizzleRowBytes, "one K block is one swizzle row and one scale group");
static_assert(kBlockN == 128, "one tile spans exactly one 128-row weight-scale block");
static_assert(kABytes % kSwizzleAtomBytes == 0 && kBBytes % kSwizzleAtomBytes == 0);
static_assert((kBlockM / kConsumerWarpgroups) * kSwizzleRowBytes % kSwizzleAtomBytes == 0,
              "each consumer's A slab must start on a swizzle atom");
static_assert(kScaleBytes % 128 == 0, "TMA destinations need 128-byte alignment");

// Dynamic shared memory: A stages, B stages, scale stages, 2 × kStages mbarriers, then
// tile_start[E + 1]; plus slack to align the base to the 1024-byte swizzle atom.
constexpr int64_t fp8_gemm_smem_bytes(int num_experts) {
  return kSwizzleAtomBytes + int64_t{kStages} * kStageBytes + 2 * kStages * 8 +
         4 * (int64_t{num_experts} + 1);
}
static_assert(fp8_gemm_smem_bytes(1024) <= 227 * 1024, "must fit Hopper's 227 KiB per block");

}  // namespace moefuse::gemm::fp8
