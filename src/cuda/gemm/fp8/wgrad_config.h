// Tile geometry, pipeline depth and register budgets of the FP8 k-grouped wgrad, with the
// shared-memory arithmetic checked at compile time. The tile and the wgmma are the forward FP8
// kernel's (128 × 128 × 128, m64n128k32); the epilogue hand-off buffer is the BF16 wgrad's.
#pragma once

#include <cstdint>

#include "cuda/gemm/backward/config.h"
#include "cuda/gemm/common/swizzle.h"
#include "cuda/gemm/common/warp_roles.h"
#include "cuda/gemm/fp8/config.h"

namespace moefuse::gemm::fp8_wgrad {

inline constexpr int kBlockM = fp8::kBlockM;  // rows of D[e] (N_a) per tile: 2 warpgroups × 64
inline constexpr int kBlockN = fp8::kBlockN;  // columns of D[e] (N_b) per tile
inline constexpr int kBlockK = fp8::kBlockK;  // 128 columns of at / bt: exactly one scale group
inline constexpr int kAccumulators = fp8::Tile128::kAccumulators;
// Four stages fit next to the 66 KiB hand-off buffer (five would need 232 KiB).
inline constexpr int kStages = 4;
inline constexpr int kGroupM = 8;  // m-blocks per raster group (tile_scheduler.h)

// Where the experts are short the tile's output, not its math, sets the pace: a 128 × 128 fp32
// tile is 64 KiB out for (K / 128) K blocks of wgmma, and the one tile buffer makes the consumers
// wait for its drain. On gpt-oss's dW2 (512 rows an expert) a tile took ~7150 cycles for ~2000
// of tensor work, DRAM 36 % busy, with the drain's 128 per-row bulk copies (ncu, run 46 calls
// 4-5). Four TMA tensor stores of swizzled 128-byte column chunks drain it faster: gpt-oss's FP8
// wgrads 0.89-0.92× the time (dW2 alone 0.915×, the FP8 step 0.957×), but qwen3's dW2 (1024 rows)
// 1.055× and the deepseek slice's wgrad stages (2048) 1.03-1.04× (run 46 call 7): where the math
// hides the drain, a 64 KiB tensor store seems to hold the TMA engine from the next stages'
// loads. Hence tensor stores only when the experts' mean rows (the operands' capacity over the
// experts, host-known) are at most this many 128-row groups.
inline constexpr int kTensorStoreMaxGroupsPerExpert = 6;
constexpr bool drains_by_tensor_stores(int64_t groups, int64_t num_experts) {
  return groups <= kTensorStoreMaxGroupsPerExpert * num_experts;
}

// Warp roles and budgets as the BF16 wgrad: thread 0 of warpgroup 0 produces, warps 1-3 drain
// the hand-off (with accumulate they keep 8 rows of old and new values in flight; ptxas spilled
// them at 112); the consumers hold the running sum and the group's wgmma output (64 + 64).
inline constexpr int kProducerRegs = 136;
inline constexpr int kConsumerRegs = 184;
static_assert(fits_register_file(kProducerRegs, kConsumerRegs));

inline constexpr int kABytes = kBlockM * kBlockK;                // e4m3
inline constexpr int kBBytes = kBlockN * kBlockK;
inline constexpr int kScaleBytes = (kBlockM + kBlockN) * 4;      // the stage group's scales
// A stage's B slot holds B, then the tile rows' a-scales, then the tile columns' b-scales; a
// whole number of swizzle atoms, so every B stage still starts on one.
inline constexpr int kBSlotBytes = kBBytes + kScaleBytes;
inline constexpr int kStageBytes = kABytes + kBSlotBytes;        // TMA bytes per stage
static_assert(kBSlotBytes % kSwizzleAtomBytes == 0 && kABytes % kSwizzleAtomBytes == 0);
static_assert(kBBytes % 128 == 0 && (kBlockM * 4) % 128 == 0,
              "TMA destinations need 128-byte alignment");

// One hand-off carries a whole fp32 tile: 128 rows of 128 fp32 = one 512-byte buffer row.
static_assert(kBlockM == bwd::kBlockM && kBlockN * 4 == bwd::kTileRowBytes);

// Dynamic shared memory in HandoffSharedLayout's order: stages, the tile buffer, 2 × kStages + 2
// mbarriers, group_start[E + 1], the expert order [E]; plus slack to align the base to the
// 1024-byte swizzle atom.
constexpr int64_t smem_bytes(int num_experts) {
  return kSwizzleAtomBytes + int64_t{kStages} * kStageBytes + bwd::kTileBufferBytes +
         (2 * kStages + 2) * 8 + 4 * (2 * int64_t{num_experts} + 1);
}
static_assert(smem_bytes(1024) <= 227 * 1024, "must fit Hopper's 227 KiB per block");

}  // namespace moefuse::gemm::fp8_wgrad
