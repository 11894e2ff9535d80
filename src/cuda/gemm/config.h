// Tile geometry, pipeline depth, warp roles and register budgets of the grouped GEMM kernel, with
// the shared-memory arithmetic checked at compile time.
#pragma once

#include <cstdint>

#include "cuda/gemm/common/narrow_width.h"
#include "cuda/gemm/common/swizzle.h"
#include "cuda/gemm/common/warp_roles.h"

namespace moefuse::gemm {

inline constexpr int kBlockM = 128;  // rows per tile: 2 consumer warpgroups × 64
inline constexpr int kBlockN = 256;  // columns of h per tile (128 GLU outputs)
// The overlapped variant (bf16 output, A by TMA) runs 128 × 192 tiles where narrow_width
// (common/narrow_width.h): kNarrowBlockN columns (96 GLU outputs).
static_assert(kBlockN == kWideBlockN);
inline constexpr int kBlockK = 64;   // 64 bf16 = 128 bytes: one 128B-swizzle row
// m-blocks per raster group (tile_scheduler.h). 16, not 8, so that an expert of 16 or 32 m-blocks
// (deepseek slice, mixtral) streams each weight n-block through HBM once or twice instead of two
// or four times. Run 48 (H200, A/B, five rounds over two sessions): deepseek fused FC2 0.967x the
// time, FC1 0.987-0.994x, its layer forward 0.989-0.994x; experts of at most 9 m-blocks (qwen3,
// gpt-oss) unchanged within noise.
inline constexpr int kGroupM = 16;
// CTAs a cluster of the overlapped variant (bf16 output, A by TMA) in 256-wide tiles (the
// 192-wide run one CTA a tile: launch_bf16_narrow.cu says why): 2, units of two tiles that
// share a weight tile (or activation rows) by TMA multicast (cluster_scheduler.h), as the dGLU
// dgrad. Run 18 (H200, interleaved A/B, two rounds, time against one CTA): fused FC1 and FC2
// qwen3 0.971 and 0.970, gpt-oss 1.006 and 0.997, deepseek 1.003 and 0.988, mixtral 1.003 and
// 1.000; unfused 0.98-1.003.
inline constexpr int kForwardCluster = 2;
inline constexpr int kWgmmaK = 16;

// Warp roles (common/warp_roles.h): warpgroup 0 produces (one thread issues TMA, or all 128
// threads issue the gather variant's cp.async row copies) and, in the overlapped variant (bf16
// output, not gathered), warps 1-3 of it run the epilogue; warpgroups 1 and 2 consume.
//
// setmaxnreg budgets: the producer warpgroup runs the TMA producer and the epilogue warps' 8-wide
// row pieces, or the gather producer (8 row tokens and their addresses per thread); the
// consumers hold 128 fp32 accumulators each.
inline constexpr int kProducerRegs = 72;
inline constexpr int kConsumerRegs = 216;
static_assert(fits_register_file(kProducerRegs, kConsumerRegs));

inline constexpr int kABytes = kBlockM * kBlockK * 2;  // one stage of A, bf16
static_assert(kBlockK * 2 == kSwizzleRowBytes, "one K block must be exactly one swizzle row");
static_assert(kABytes % kSwizzleAtomBytes == 0);
static_assert((kBlockM / kConsumerWarpgroups) * kSwizzleRowBytes % kSwizzleAtomBytes == 0,
              "each consumer's A slab must start on a swizzle atom");

// The in-consumer variants' staging (fp32 output, gather): two 64-row × 160-byte chunk buffers
// (epilogues/staged_store.cuh stage_pitch) at the start of the staging region.
inline constexpr int kEpilogueStageBytes = (kBlockM / kConsumerWarpgroups) * (128 + 32);

// A kernel's tiles N columns wide: its stage ring and its staging region, the overlapped
// epilogue's bf16 tile buffer (128 rows of N columns; the pitch puts a warp's 8 rows of 4-byte
// pairs 16 bytes apart modulo 128, on all 32 banks: epilogues/staged_tile.cuh).
// - 256 (every variant): three stages beside the 66 KiB buffer; the mainloop measured no slower
//   with three than with four (docs/measurements.md).
// - 192 (the overlapped variant where narrow_width): four 40 KiB stages beside a 50 KiB buffer,
//   the backward's narrow dGLU ring (backward/config.h GluStages; not measured against three).
template <int N>
struct TileConfig {
  static constexpr int kN = N;
  static constexpr int kStages = N == kBlockN ? 3 : 4;
  static constexpr int kBBytes = N * kBlockK * 2;  // one stage of B
  static constexpr int kTilePitch = N * 2 + 16;    // bytes per staged row
  static constexpr int kTileStageBytes = kBlockM * kTilePitch;
  static_assert(N == kBlockN || N == kNarrowBlockN);
  static_assert(kBBytes % kSwizzleAtomBytes == 0 && (kBBytes / 2) % kSwizzleAtomBytes == 0,
                "B and each cluster half of it start on a swizzle atom");
  static_assert(kTilePitch % 128 == 16, "a warp's staged pairs on all 32 banks");
  static_assert(kConsumerWarpgroups * kEpilogueStageBytes <= kTileStageBytes);
  // Dynamic shared memory (common/handoff_layout.cuh): stages, the staging region, then
  // 2 × kStages + 2 mbarriers, then tile_start[E + 1]; plus slack to align the base to the
  // 1024-byte swizzle atom.
  static constexpr int64_t smem_bytes(int num_experts) {
    return kSwizzleAtomBytes + int64_t{kStages} * (kABytes + kBBytes) + kTileStageBytes +
           (2 * kStages + 2) * 8 + 4 * (int64_t{num_experts} + 1);
  }
  static_assert(smem_bytes(1024) <= 227 * 1024, "must fit Hopper's 227 KiB per block");
};

}  // namespace moefuse::gemm
