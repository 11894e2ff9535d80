// Tile geometry, pipeline depth, warp roles and register budgets of the backward grouped GEMMs
// (dgrad and wgrad), with the shared-memory arithmetic checked at compile time. Own constants
// (not the forward's config.h) so that tuning the forward never silently changes these kernels.
#pragma once

#include <cstdint>

#include "cuda/gemm/cluster_scheduler.h"
#include "cuda/gemm/common/narrow_width.h"
#include "cuda/gemm/common/swizzle.h"
#include "cuda/gemm/common/warp_roles.h"

namespace moefuse::gemm::bwd {

inline constexpr int kBlockM = 128;  // output rows per tile: 2 consumer warpgroups × 64
inline constexpr int kBlockN = 256;  // output columns per tile: one wgmma m64n256k16 row slab
// The narrow tile width (kNarrowBlockN, m64n192): the FC2 dgrad's dGLU up to kDgluNarrowMaxK,
// and the plain dgrad and the TMA wgrad where common/narrow_width.h's rule says.
static_assert(kBlockN == kWideBlockN);
inline constexpr int kGroupM = 8;    // the wgrads' m-blocks (rows of dW) per raster group
// The dgrads' m-blocks (an expert's token rows) per raster group (tile_scheduler.h), 16 as the
// forward's (config.h says why). Run 48 call 2 (two rounds): mixtral's dgrads 0.982-0.984x the
// time, deepseek's 1.002-1.007x, the others unchanged within noise. The wgrads' m-blocks are rows
// of dW, where 16 read 0.990-1.026x (run 30 call 8).
inline constexpr int kDgradGroupM = 16;
inline constexpr int kWgmmaK = 16;
// An MN-major operand arrives as TMA boxes of 64 MN-contiguous elements (128 bytes: one
// 128B-swizzle row) × a stage's K rows, boxes of a tile back to back.
inline constexpr int kMnChunk = 64;

// Warp roles (common/warp_roles.h): warps 1-3 of warpgroup 0 are the epilogue warps
// (common/tile_handoff.cuh) in the dgrad and the TMA wgrad; the gather wgrad's producer needs all
// 128 threads, so its consumers keep the epilogue.
//
// setmaxnreg budgets (common/warp_roles.h has the rule): warpgroup 0 holds the epilogue warps,
// whose dGLU keeps six rows' loads in flight; the consumers now hold only the accumulators and
// the hand-off. The gather producer keeps 16 source addresses live.
inline constexpr int kProducerRegs = 136;
inline constexpr int kConsumerRegs = 184;
inline constexpr int kGatherProducerRegs = 72;
inline constexpr int kGatherConsumerRegs = 216;
static_assert(fits_register_file(kProducerRegs, kConsumerRegs));
static_assert(fits_register_file(kGatherProducerRegs, kGatherConsumerRegs));

static_assert(kMnChunk * 2 == kSwizzleRowBytes, "an MN-major chunk must be one swizzle row");
static_assert(kBlockM == kConsumerWarpgroups * kMnChunk,
              "each consumer's MN-major A slab is exactly one chunk");
static_assert(kBlockN % kMnChunk == 0);

// Named barriers (id 0 is __syncthreads): the two consumer warpgroups together (wgrad tail
// zeroing), and one per consumer warpgroup from kSlabBarrierFirstId (the gather wgrad's sub-tile
// stores, slab_tma_store.cuh). The epilogue hand-off uses mbarriers only.
inline constexpr int kConsumerBarrierId = 1;
inline constexpr int kSlabBarrierFirstId = 2;

// The hand-off's tile buffer (tile_handoff.cuh): 128 rows of 512 bytes (256 bf16 or 128 fp32
// columns). The row pitch spreads a warp's accumulator pairs (rows lane / 4, 8 bytes apart
// across the lanes of a row) over the banks, and which pitch does depends on the pair's size:
// - bf16 pairs (4-byte stores, a whole warp: rows 0-7, 16 bytes each) need rows 16 bytes apart
//   modulo 128: pitch 528;
// - fp32 pairs (8-byte stores, issued by half-warps: rows 0-3, 32 bytes each) need rows 32
//   bytes apart: pitch 544. At 528 two rows share 4 banks, which ncu counted in run 17 as 1,024
//   excess wavefronts for every fp32 wgrad tile (8% of the kernel's; none with bf16 out).
inline constexpr int kTileRowBytes = 512;
inline constexpr int kTilePitch = kTileRowBytes + 16;
inline constexpr int kTilePitchF32 = kTileRowBytes + 32;
inline constexpr int kTileBufferBytes = kBlockM * kTilePitchF32;
constexpr int tile_pitch(bool fp32) { return fp32 ? kTilePitchF32 : kTilePitch; }

// The gather wgrad's sub-tile buffers (slab_tma_store.cuh): two per consumer warpgroup, each 64
// rows of one 128-byte TMA box row (32 fp32 or 64 bf16 columns, 128B-swizzled).
inline constexpr int kSlabSubTileRowBytes = kSwizzleRowBytes;
inline constexpr int kSlabSubTileBytes = (kBlockM / kConsumerWarpgroups) * kSlabSubTileRowBytes;
inline constexpr int kSlabBuffersBytes = kConsumerWarpgroups * 2 * kSlabSubTileBytes;
static_assert(kSlabSubTileBytes % kSwizzleAtomBytes == 0, "each buffer on a swizzle atom");

// A K loop's ring: kStages stages of kBlockK rows of K each (either operand's major-ness: an
// MN-major box is kMnChunkBytes, K row k of it at k·128 bytes), for tiles kN columns wide, beside
// a hand-off buffer of kTileBytes.
template <int K, int Count, int N = kBlockN, int TileBytes = kTileBufferBytes>
struct Stages {
  static constexpr int kBlockK = K;
  static constexpr int kStages = Count;
  static constexpr int kN = N;                  // tile columns
  static constexpr int kTileBytes = TileBytes;  // the hand-off buffer
  static constexpr int kMnChunkBytes = kMnChunk * K * 2;
  static constexpr int kABytes = kBlockM * K * 2;  // one stage of A
  static constexpr int kBBytes = N * K * 2;        // one stage of B
  static_assert(K % kWgmmaK == 0 && N % kMnChunk == 0);
  static_assert(kMnChunkBytes % kSwizzleAtomBytes == 0, "boxes keep the 1024-byte alignment");
  // Dynamic shared memory (common/handoff_layout.cuh): stages, the tile buffer, 2 × kStages + 2
  // mbarriers, tile_start[E + 1]; plus slack to align the base to the 1024-byte swizzle atom.
  static constexpr int64_t smem_bytes(int num_experts) {
    return kSwizzleAtomBytes + int64_t{kStages} * (kABytes + kBBytes) + kTileBytes +
           (2 * kStages + 2) * 8 + 4 * (int64_t{num_experts} + 1);
  }
};

// The dgrad: its K-major A needs a K block of one 128-byte swizzle row; three such stages leave
// room for the tile buffer (the forward measured no slower with three than with four).
using DgradStages = Stages<64, 3>;
static_assert(DgradStages::kBlockK * 2 == kSwizzleRowBytes, "a K-major block is one swizzle row");
static_assert(DgradStages::smem_bytes(1024) <= 227 * 1024, "must fit Hopper's 227 KiB per block");
// The wgrads: stages of 64 K rows (the gather variant's cp.async producer is written for 64-row
// blocks).
// - TMA wgrad: three, beside the hand-off's tile buffer. Six of 32 (the same 144 KiB, so that
//   four or five can be loading while the consumers hold one or two) measured no faster on an
//   H200 (run 15: qwen3 dW1 1.003x the time of 64 x 3, gpt-oss 1.003, deepseek 1.016), although
//   ncu had its consumers waiting on stage data in 36% of their samples: the wait is not for
//   stage room. Nor did four with the consumers storing their own tiles, synchronously (run 20:
//   1.01-1.07x) or by asynchronous TMA stores as the gather variant (run 21: fp32 D 1.00-1.04x,
//   bf16 D 1.03-1.12x): the epilogue warps' overlapped drain is worth more than a fourth stage.
// - Gather wgrad: its producer needs all of warpgroup 0, so its consumers store their tiles, by
//   asynchronous TMA stores through small sub-tile buffers; four stages fit beside them (run 21:
//   0.90-0.99x the time of three beside a synchronous in-consumer epilogue).
// - TMA wgrad with fp32 D, narrow (`wgrad_narrow`): tiles 128 × 192 wherever n_out is a
//   multiple of 192 (gpt-oss's 2880 = 15 × 192, which 256-wide tiles cover with a 64-column
//   tail, 6.7% of the work; qwen3's dW2, 768). The whole fp32 tile then goes over in one
//   hand-off (rows 768 bytes, 800 apart: the pitches' rule above), beside three 40 KiB stages,
//   so the consumers no longer wait for a first half's drain. Run 29 (H200, gpt-oss, three
//   interleaved rounds): dW1 0.94×, dW2 0.91× the time; the layer's step with fp32 expert
//   gradients 0.96×. Run 30 at every width: qwen3's dW2 0.965×, but where 192 leaves a column
//   tail 0.99-1.03× (qwen3's dW1, mixtral, deepseek), so those keep 256-wide tiles.
//   With bf16 D, one hand-off already, the narrow tile measured 0.98-1.02×: not used there.
//   The 256-wide fp32 tile in one hand-off leaves room for only 72 KiB of stages, which cost the
//   mainloop more than the hand-off saved (run 29, call 1: 1.10-1.19× on qwen3, deepseek,
//   mixtral).
using WgradStages = Stages<64, 3>;
inline constexpr int kNarrowRowBytes = kNarrowBlockN * 4;
inline constexpr int kNarrowPitch = kNarrowRowBytes + 32;
using WgradNarrowStages = Stages<64, 3, kNarrowBlockN, kBlockM * kNarrowPitch>;
constexpr bool wgrad_narrow(int64_t n_out, bool d_fp32) {
  return d_fp32 && n_out % kNarrowBlockN == 0;
}
using GatherWgradStages = Stages<64, 4, kBlockN, kSlabBuffersBytes>;
// The TMA wgrads hold the expert order (wgrad_order.h) in the layout's tile_start slot.
static_assert(WgradStages::smem_bytes(1024) <= 227 * 1024, "must fit Hopper's 227 KiB per block");
static_assert(WgradNarrowStages::smem_bytes(1024) <= 227 * 1024, "must fit Hopper's 227 KiB");
static_assert(GatherWgradStages::smem_bytes(0) <= 227 * 1024, "must fit Hopper's 227 KiB");

// The FC2 dgrad with the dGLU epilogue has two shapes, chosen by K (the hidden size H):
// - narrow (K <= kDgluNarrowMaxK): tiles 128 × 192 and a fourth warpgroup of epilogue warps,
//   seven in all (warps 1-3 and 12-15). With a short K the epilogue bounds the kernel (ncu,
//   session 14: three warps, one a scheduler, take longer per tile than the mainloop, and the
//   consumers wait for the tile buffer). 512 threads launch with 128 registers each, which a
//   128 × 256 tile's 128 accumulators a consumer thread cannot fit (ptxas wants 154 for the
//   m64n256 wgmma); 96 (m64n192) fit in 122. Four 40 KiB stages beside the 50 KiB buffer of g.
// - wide (longer K): the plain dgrad's 128 × 256 tiles, 384 threads and three epilogue warps;
//   there the mainloop bounds the kernel and 192-column tiles load 11% more per flop.
// Run 15 (H200, fused FC2 dgrad, narrow against wide): qwen3 (H 2048) 1.155 → 1.034 ms, gpt-oss
// (2880) 3.34 → 3.00, deepseek (7168) 3.25 → 3.43.
inline constexpr int kGluBlockN = kNarrowBlockN;
inline constexpr int kGluThreads = 4 * kWarpgroupThreads;
inline constexpr int kGluEpilogueWarps = kEpilogueWarps + 4;
inline constexpr int kGluTileBufferBytes = kBlockM * (kGluBlockN * 2 + 16);
using GluStages = Stages<64, 4, kGluBlockN, kGluTileBufferBytes>;
static_assert(GluStages::smem_bytes(1024) <= 227 * 1024, "must fit Hopper's 227 KiB per block");
inline constexpr int64_t kDgluNarrowMaxK = 3072;
constexpr int dglu_block_n(int64_t k) { return k <= kDgluNarrowMaxK ? kGluBlockN : kBlockN; }

// A dgrad kernel's shape (dgrad_kernel.cuh): stage ring and tile width G, epilogue warps, dGLU
// epilogue or plain store, CTAs a cluster. The 384-thread shapes move registers to the consumers
// (setmaxnreg); the 512-thread one keeps the 128 each thread launches with.
// Clusters (CTAs sharing one operand by multicast, cluster_scheduler.h) for the dGLU shapes only.
// Run 16 (H200, interleaved A/B, 2-CTA clusters against none): fused FC2 dgrad qwen3 0.913x the
// time (narrow), gpt-oss 0.940 (narrow), deepseek 0.985 and mixtral 1.006 (wide); the plain store
// (FC1 dgrad, compute-bound: ncu 87% SM) 1.017, 1.046, 1.008, 1.002 — coupling the CTAs'
// pipelines costs it more than the L2 loads it saves. In pairs the narrow shape is still bound by
// L2 bandwidth (ncu, run 17, qwen3: L2 88%, SM 62%), but fours (one W2 tile for four m-blocks,
// 0.70 instead of 0.90 MB of L2 reads a tile per 2048 of K) did not pay (run 18, one round):
// narrow qwen3 0.987x, gpt-oss 1.057; the wide shape in fours deepseek 1.085, mixtral 1.088.
static_assert(kDgradGroupM % kClusterSize == 0, "raster groups hold whole m-groups");
template <class Ring, int EpilogueWarps, bool Glu, int Cluster>
struct DgradShape {
  using G = Ring;
  static constexpr bool kGlu = Glu;
  static constexpr int kCluster = Cluster;
  static constexpr int kEpilogueWarps = EpilogueWarps;
  static constexpr int kThreads = EpilogueWarps == gemm::kEpilogueWarps ? gemm::kThreads
                                                                         : kGluThreads;
  static constexpr bool kMovesRegisters = kThreads == gemm::kThreads;
  // The dGLU's g goes over as bf16: a tile row of G::kN columns, padded as kTilePitch.
  static constexpr int kTilePitch = G::kN * 2 + 16;
  static_assert(kBlockM * kTilePitch <= G::kTileBytes);
};
using DgradStoreShape = DgradShape<DgradStages, kEpilogueWarps, false, 1>;
// The plain dgrad with bf16 D in the narrow dGLU shape's 128 × 192 tiles and ring, where 192
// divides N and 256 does not (gpt-oss's FC1 dgrad, N = H = 2880: no 64-column tail), three
// epilogue warps.
using DgradNarrowStoreShape = DgradShape<GluStages, kEpilogueWarps, false, 1>;
constexpr bool dgrad_narrow(int64_t n, bool d_fp32) { return !d_fp32 && narrow_width(n); }
using DgluWideShape = DgradShape<DgradStages, kEpilogueWarps, true, kClusterSize>;
using DgluNarrowShape = DgradShape<GluStages, kGluEpilogueWarps, true, kClusterSize>;
static_assert(DgluWideShape::kTilePitch == kTilePitch && DgluNarrowShape::kThreads == kGluThreads);

}  // namespace moefuse::gemm::bwd
