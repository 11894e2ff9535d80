// Tile geometry, pipeline depth, warp roles and register budgets of the backward grouped GEMMs
// (dgrad and wgrad), with the shared-memory arithmetic checked at compile time. Own constants
// (not the forward's config.h) so that tuning the forward never silently changes these kernels.
#pragma once

#include <cstdint>

namespace moefuse::gemm::bwd {

inline constexpr int kBlockM = 128;  // output rows per tile: 2 consumer warpgroups × 64
inline constexpr int kBlockN = 256;  // output columns per tile: one wgmma m64n256k16 row slab
inline constexpr int kBlockK = 64;   // K per stage
inline constexpr int kStages = 4;
inline constexpr int kGroupM = 8;    // m-blocks per raster group (tile_scheduler.h)
inline constexpr int kWgmmaK = 16;

// An MN-major operand arrives as TMA boxes of 64 MN-contiguous elements (128 bytes: one
// 128B-swizzle row) × kBlockK K rows, each box kMnChunkBytes, boxes of a tile back to back.
inline constexpr int kMnChunk = 64;
inline constexpr int kMnChunkBytes = kMnChunk * kBlockK * 2;  // 8 KiB
inline constexpr int kSwizzleAtomBytes = 1024;                 // 8 rows × 128 B

inline constexpr int kWarpgroupThreads = 128;
inline constexpr int kConsumerWarpgroups = 2;
inline constexpr int kThreads = kWarpgroupThreads * (1 + kConsumerWarpgroups);
inline constexpr int kConsumerThreads = kWarpgroupThreads * kConsumerWarpgroups;

// setmaxnreg budgets (see the forward's config.h): the gather producer of the wgrad keeps 16
// source addresses live, so it gets more and the consumers a little less.
inline constexpr int kProducerRegs = 40;
inline constexpr int kConsumerRegs = 232;
inline constexpr int kGatherProducerRegs = 72;
inline constexpr int kGatherConsumerRegs = 216;
static_assert(kProducerRegs * 128 + kConsumerRegs * 256 <= 168 * kThreads);
static_assert(kGatherProducerRegs * 128 + kGatherConsumerRegs * 256 <= 168 * kThreads);

inline constexpr int kABytes = kBlockM * kBlockK * 2;  // one stage of A (either major-ness)
inline constexpr int kBBytes = kBlockN * kBlockK * 2;  // one stage of B
static_assert(kBlockK * 2 == 128, "a K-major K block must be exactly one 128-byte swizzle row");
static_assert(kMnChunk * 2 == 128, "an MN-major chunk must be exactly one 128-byte swizzle row");
static_assert(kBlockM == kConsumerWarpgroups * kMnChunk,
              "each consumer's MN-major A slab is exactly one chunk");
static_assert(kBlockN % kMnChunk == 0 && kBlockK % 8 == 0);
static_assert(kABytes % kSwizzleAtomBytes == 0 && kBBytes % kSwizzleAtomBytes == 0);

// Named barriers (id 0 is __syncthreads): the two consumer warpgroups together (wgrad tail
// zeroing), and one per consumer warpgroup from kSlabBarrierFirstId (epilogue staging).
inline constexpr int kConsumerBarrierId = 1;
inline constexpr int kSlabBarrierFirstId = 2;

// Epilogue staging buffer of one consumer warpgroup (staged_store.cuh): 64 rows × (128 + 16) B.
inline constexpr int kEpilogueStageBytes = (kBlockM / kConsumerWarpgroups) * (128 + 16);

// Dynamic shared memory: stages, the consumers' staging buffers, 2 × kStages mbarriers,
// tile_start[E + 1]; plus slack to align the base to the 1024-byte swizzle atom.
constexpr int64_t smem_bytes(int num_experts) {
  return kSwizzleAtomBytes + int64_t{kStages} * (kABytes + kBBytes) +
         kConsumerWarpgroups * kEpilogueStageBytes + 2 * kStages * 8 +
         4 * (int64_t{num_experts} + 1);
}
static_assert(smem_bytes(1024) <= 227 * 1024, "must fit Hopper's 227 KiB per block");

}  // namespace moefuse::gemm::bwd
