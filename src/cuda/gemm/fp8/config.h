// Tile geometry, pipeline depth, cluster shape, warp roles and register budgets of the FP8
// grouped GEMM (DeepSeek-V3 recipe), with the shared-memory arithmetic checked at compile time.
#pragma once

#include <cstdint>

#include "cuda/gemm/common/swizzle.h"
#include "cuda/gemm/common/warp_roles.h"
#include "cuda/gemm/cluster_scheduler.h"

namespace moefuse::gemm::fp8 {

inline constexpr int kBlockM = 128;  // rows per tile: 2 consumer warpgroups × 64
// Tile columns. The consumer holds two accumulator sets (the running fp32 sum and the current K
// block's wgmma output), N / 2 registers each; N = 256 would need 256 (docs/fp8.md, "Speed",
// weighs the alternatives). 128 (one weight-scale block a tile) for every instantiation but the
// bf16 forward output's, which runs 192 (Fp8Tile below says why).
inline constexpr int kBlockN = 128;
inline constexpr int kBf16OutBlockN = 192;
inline constexpr int kBlockK = 128;  // 128 e4m3 = 128 bytes: one 128B-swizzle row, one scale group
// Columns of a weight-scale block (the recipe's 128 × 128 blocks of B).
inline constexpr int kWeightBlock = 128;
inline constexpr int kWgmmaK = 32;   // wgmma m64n128k32 e4m3
// m-blocks per raster group (cluster_scheduler.h): 16 as the BF16 forward's (../config.h says
// why). Run 48 call 2: deepseek's and mixtral's FP8 layer forward 0.981 / 0.990x the time.
inline constexpr int kGroupM = 16;
static_assert(kGroupM % kClusterSize == 0, "raster groups hold whole m-pairs");

// Warp roles (common/warp_roles.h): in warpgroup 0 warp 0 issues the TMA loads and, with bf16 or
// E4M3 forward output and in the dGLU, warps 1-3 drain the hand-off's tile buffer; warpgroups 1
// and 2 consume. The dGLU and the E4M3 forward at short K add a fourth warpgroup of epilogue
// warps (Roles below).
//
// Threads, epilogue warps and setmaxnreg budgets by role set (kernel.cuh's kRoleSet: 0 the
// forward's, 3 or 7 the epilogue warps of the dGLU, 7 also the E4M3 forward's at short K). The
// consumers hold 64 + 64 accumulators (ptxas, CUDA 13.0, spills nothing in them down to 144).
// - forward, 384 threads: 80 × 128 + 208 × 256 fits the CTA's 168 × 384 (common/warp_roles.h);
//   the epilogue warps unpack two 8-wide bf16 pieces (72 spilled 4 bytes, 80 spills nothing).
// - dGLU, three epilogue warps, 384 threads: 136 / 184, the BF16 dgrad's split; its drain keeps
//   six octets' pre loads in flight a lane (backward/dglu_drain.cuh; 128 is the least that does
//   not spill, 80 spilled 1,288 bytes).
// - dGLU, seven epilogue warps (warps 1-3 and 12-15), 512 threads launched with 128 registers
//   each: 112 for warpgroups 0 and 3, 144 for the consumers; four octets in flight a drain lane
//   (five spilled 4 bytes at 112, six 20 at 120). The BF16 narrow dgrad's remedy
//   (backward/config.h): with three, the FP8 dgrad's consumers waited for the tile buffer in 26%
//   of all stall samples (run 22, ncu, qwen3), the drain (pre read, d_pre and scaled_act written,
//   160 KB a 128 × 128 tile, and the activation's derivative on every element) outlasting the
//   tile's mainloop. Run 22 (H200, against three): the FP8 FC2 dgrad qwen3 (K = H = 2048) 0.79×
//   the time, gpt-oss (2880) 0.82×, mixtral (4096) 1.01×, deepseek (7168) 1.03×: at long K the
//   mainloop bounds the kernel again, so seven warps only up to kSevenWarpsMaxK.
//   The E4M3 forward's drain (e4m3_drain.cuh: two shared-memory passes, the amax exchange, the
//   conversion) had qwen3's consumers waiting for the tile buffer in 10.6% of their samples with
//   three warps (run 27 call 4): the same remedy, the same K bound.
struct Roles {
  int threads;
  int epilogue_warps;
  int producer_regs;  // setmaxnreg of warpgroup 0 (and 3)
  int consumer_regs;  // setmaxnreg of warpgroups 1 and 2
  int drain_octets;   // the dGLU drain's octets in flight a lane (0: no dGLU)
};
// n: the tile's width (Fp8Tile). At 192 the forward's consumers hold 96 + 96 accumulators:
// 208 spilled 12 bytes, 216 (with 72 for warpgroup 0, the BF16 forward's split) spills nothing.
constexpr Roles roles(int role_set, int n = kBlockN) {
  if (role_set == 0 && n == kBf16OutBlockN)
    return {.threads = kThreads, .epilogue_warps = kEpilogueWarps, .producer_regs = 72,
            .consumer_regs = 216, .drain_octets = 0};
  if (role_set == 7) return {.threads = 4 * kWarpgroupThreads, .epilogue_warps = 7,
                             .producer_regs = 112, .consumer_regs = 144, .drain_octets = 4};
  if (role_set == 3) return {.threads = kThreads, .epilogue_warps = kEpilogueWarps,
                             .producer_regs = 136, .consumer_regs = 184, .drain_octets = 6};
  return {.threads = kThreads, .epilogue_warps = kEpilogueWarps, .producer_regs = 80,
          .consumer_regs = 208, .drain_octets = 0};
}
constexpr bool fit(const Roles& r) {
  return fits_register_file(r.producer_regs, r.consumer_regs, r.threads);
}
static_assert(fit(roles(0)) && fit(roles(3)) && fit(roles(7)) && fit(roles(0, kBf16OutBlockN)),
              "setmaxnreg budgets too large");
// The epilogue warps of the dGLU (K = H) and the E4M3 forward (K = H for FC1) by K: seven up to
// kSevenWarpsMaxK, three beyond.
inline constexpr int64_t kSevenWarpsMaxK = 3072;
constexpr bool seven_epilogue_warps(int64_t k) { return k <= kSevenWarpsMaxK; }

inline constexpr int kABytes = kBlockM * kBlockK;  // one stage of A, e4m3 (B's: Fp8Tile)
// The tile rows' activation scales of one K group arrive as one TMA box over the K-major scale
// tensor, whose innermost coordinate is the row. TMA faults (illegal instruction, measured on the
// H200) unless that coordinate starts on 16 bytes, and an expert's rows start anywhere: the box
// starts at the tile's first row rounded down to a multiple of 4 and is 4 rows longer.
inline constexpr int kScaleAlignRows = 4;
inline constexpr int kScaleBoxRows = kBlockM + kScaleAlignRows;
inline constexpr int kScaleBytes = kScaleBoxRows * 4;  // what the box delivers
inline constexpr int kScaleSlotBytes = 640;            // kScaleBytes rounded up to 128
// The stage's weight scale (one fp32 for the tile's n-block and K block; a 192-wide tile's two,
// Fp8Tile) sits after the box: the producer stores it there, so the consumers read it with the
// row scales from shared memory instead of a global load per K block on their critical path
// (mainloop.cuh).
inline constexpr int kBScaleOffset = kScaleBytes;
// The box's first row for a tile whose first row is `first`; row r of the tile is then entry
// r + first - scale_box_row(first) of the box.
MOEFUSE_HOST_DEVICE constexpr int scale_box_row(int first) { return first & -kScaleAlignRows; }
// A and B stages are loaded in halves of 64 rows (8 KB, 8 swizzle atoms): one half per CTA of the
// cluster for the shared operand (multicast), both halves for the CTA's own one.
inline constexpr int kHalfRows = kBlockM / kClusterSize;
inline constexpr int kHalfBytes = kHalfRows * kBlockK;
static_assert(kBlockM == kBlockN, "A and B stages split into the same halves");
static_assert(kHalfBytes % kSwizzleAtomBytes == 0, "a half starts on a swizzle atom");
static_assert(kBlockK == kSwizzleRowBytes, "one K block is one swizzle row and one scale group");
static_assert(kBlockN == kWeightBlock, "a 128-wide tile spans exactly one weight-scale block");
static_assert(kABytes % kSwizzleAtomBytes == 0);
static_assert((kBlockM / kConsumerWarpgroups) * kSwizzleRowBytes % kSwizzleAtomBytes == 0,
              "each consumer's A slab must start on a swizzle atom");
static_assert(kScaleSlotBytes % 128 == 0 && kScaleSlotBytes >= kScaleBytes,
              "TMA destinations need 128-byte alignment");
static_assert(kScaleBytes % 16 == 0, "a TMA box's inner extent is a multiple of 16 bytes");
static_assert(kBScaleOffset + 8 <= kScaleSlotBytes, "two weight scales fit behind the box");

// E4M3 GLU output (e4m3_drain.cuh): a CTA's row amax of its tile, and its partner's, double
// buffered (a CTA's epilogue can be one tile ahead of its partner's).
inline constexpr int kAmaxBuffers = 2;
inline constexpr int kAmaxBytes = (1 + kAmaxBuffers) * kBlockM * 4;

// Empty-barrier arrivals: lanes 0 and 1 of each consumer warp of both CTAs (mainloop.cuh).
inline constexpr int kEmptyArrivals = (kConsumerThreads / 32) * kClusterSize;

// Dynamic shared memory for `stages` stages of `stage_bytes` and a tile buffer of `tile_bytes`:
// A stages, B stages, scale stages, the tile buffer, the amax buffers, 2 × stages + 2 + 2 ×
// kAmaxBuffers mbarriers, then unit_start[E + 1]; plus slack to align the base to the 1024-byte
// swizzle atom.
constexpr int64_t fp8_gemm_smem_bytes(int stages, int stage_bytes, int tile_bytes,
                                      int num_experts) {
  return kSwizzleAtomBytes + int64_t{stages} * stage_bytes + tile_bytes + kAmaxBytes +
         (2 * stages + 2 + 2 * kAmaxBuffers) * 8 + 4 * (int64_t{num_experts} + 1);
}

// The FP8 kernels' tile, kN columns wide: 128 (kBlockN, Tile128 below: every instantiation but
// one, the dgrads' and the FP8 wgrad's included), or 192 with bf16 output (FC2 with its row scale,
// FC1 with its activation, the FC1 dgrad, the plain GEMMs). A 192-wide tile spans two weight-scale
// blocks, starting at column 0 or 64 of one (second_weight_group), so each stage carries two
// weight scales; 4 stages fit beside its 50 KB tile buffer. Run 40 (H200, interleaved A/B in one
// binary, the time at 192 against 128): FC2 0.81 (qwen3, K 768), 0.93-0.94 (gpt-oss), 0.96
// (deepseek); FC1 0.94 (gpt-oss), 0.98-1.01 (qwen3, deepseek); DeepGEMM's K = 2048 shapes
// 0.91-1.02 (eight of ten 0.94-0.98), K = 7168 0.98-1.00; in the FP8 layer the fc2 stage 0.80-0.81
// / 0.90-0.94 and fc1_dgrad 0.96 / 0.91-0.95 (qwen3 / gpt-oss). The long-K shapes' indifference
// refutes the estimate that shared-memory bandwidth bounds the 128-wide mainloop (docs/fp8.md):
// what 192 saves is per-tile work (a third fewer tiles, hand-offs and scale loads) and gpt-oss's N
// tails (2880 = 15 × 192). The E4M3 output (1 × 128 scale groups of act, e4m3_drain.cuh), the dGLU
// and fp32 output keep 128. The FP8 layer's step: docs/fp8.md "Wider tiles".
template <int kN>
struct Fp8Tile {
  static_assert(kN == fp8::kBlockN || kN == kBf16OutBlockN, "the widths the kernel is written for");
  static constexpr int kBlockN = kN;
  static constexpr int kAccumulators = kN / 2;  // fp32 per thread for m64nN
  static constexpr int kBBytes = kN * kBlockK;  // one stage of B, e4m3
  // B in halves of kN / 2 rows, one per CTA of a cluster when B is the shared operand.
  static constexpr int kBHalfRows = kN / kClusterSize;
  static constexpr int kBHalfBytes = kBHalfRows * kBlockK;
  static constexpr int kStageBytes = kABytes + kBBytes + kScaleSlotBytes;
  // The hand-off's tile buffer (bf16 forward output: staged_tile.cuh; the dGLU's g:
  // dglu_handoff.cuh): 128 rows of N bf16 at a pitch of 2N + 16 bytes, an odd multiple of 16, so
  // that a warp's 8 rows of 16-byte pieces hit all 32 banks.
  static constexpr int kTilePitch = kN * 2 + 16;
  static constexpr int kTileBytes = kBlockM * kTilePitch;
  // As many stages as fit at the most experts, beside the 256 bytes of static tile slots
  // (common/tile_slots.cuh).
  static constexpr int kStages = [] {
    int s = 1;
    while (fp8_gemm_smem_bytes(s + 1, kStageBytes, kTileBytes, 1024) + 256 <= 227 * 1024) ++s;
    return s;
  }();
  static constexpr int64_t smem_bytes(int num_experts) {
    return fp8_gemm_smem_bytes(kStages, kStageBytes, kTileBytes, num_experts);
  }
  static_assert(kBBytes % kSwizzleAtomBytes == 0 && kBHalfBytes % kSwizzleAtomBytes == 0,
                "B and its halves start on swizzle atoms");
  static_assert(kStageBytes * kStages % 16 == 0, "the tile buffer and barriers stay aligned");
};
// The 128-wide tile of every instantiation but the bf16 forward output's.
using Tile128 = Fp8Tile<kBlockN>;
// Five stages at 128 wide, four at 192: one more does not fit beside the tile buffer.
static_assert(Tile128::kStages == 5 && Fp8Tile<kBf16OutBlockN>::kStages == 4);
// The weight blocks' two scales must cover the tile: its columns lie in at most two blocks.
static_assert(kBf16OutBlockN <= 2 * kWeightBlock && kBf16OutBlockN % 64 == 0);

// The 8-column group of a kN-wide tile whose first column is n0 at which the next weight-scale
// block begins (kN / 8 when the tile lies in one block). n0 is a multiple of kN, so at 192 the
// tile starts at column 0 or 64 of a block: 16 or 8.
template <int kN>
MOEFUSE_HOST_DEVICE constexpr int second_weight_group(int n0) {
  const int to_next = kWeightBlock - n0 % kWeightBlock;
  return (to_next < kN ? to_next : kN) / 8;
}

}  // namespace moefuse::gemm::fp8
