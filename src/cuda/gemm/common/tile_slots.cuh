// The tiles of a persistent CTA, described once by its producer for its consumers: a ring of
// kTileSlots slots in shared memory, each the (expert, m-block, n-block) of one unit's tile, its
// rows and whether the CTA has a tile in it (cluster_scheduler.h phantoms).
//
// Why: every role used to find its tile itself — a binary search over tile_start, the expert's
// offsets from global memory, three integer divisions. The producer and the epilogue warps do
// it off the critical path, but the consumers did it between one tile's hand-off and the next
// tile's first wgmma, with both consumer warpgroups at that point at once: ~230 instructions
// with two dependent loads, the tensor cores idle throughout (SASS of the 256-wide forward,
// session 32). Now the consumers read a slot after the wait they make anyway.
//
// Protocol (unit i of the CTA's walk, slot i % kTileSlots):
//   producer: after its wait on empty for unit i's first stage, write the slot, then arrive on
//     that stage's full barrier (mbarrier.arrive has release semantics);
//   consumers: wait on full for unit i's first stage (acquire), then read the slot (one lane a
//     warp, shuffled to the others: read_tile).
// The consumers read slot i before they release unit i's first stage. The producer overwrites
// it for unit i + kTileSlots after its empty wait for that unit's first stage, i.e. after the
// consumers released the stage kStages K blocks before it; with at least one K block a unit
// (every kernel has K > 0) that stage is unit i's first or later as long as kTileSlots >=
// kStages, so the read came first.
#pragma once

#include "cuda/gemm/cluster_scheduler.h"
#include "cuda/gemm/common/tile_rows.cuh"

namespace moefuse::gemm {

inline constexpr int kTileSlots = 8;

struct alignas(16) TileSlot {
  TileCoord tile;
  int live;  // 0: a phantom (no tile for this CTA in the unit)
  TileRows rows;
};

template <int kStages>
constexpr bool tile_slots_cover() {
  return kTileSlots >= kStages;
}

// The slots are static shared memory, which Hopper's 227 KiB a block counts together with the
// dynamic part: a kernel whose dynamic shared memory at the most experts is `dynamic_bytes`
// must leave room for them (aligned, they take 256 bytes: cuobjdump -res-usage).
constexpr bool fits_beside_tile_slots(int64_t dynamic_bytes) {
  return dynamic_bytes + 256 <= 227 * 1024;
}

// The barrier asm (CUTLASS's and common/pipeline.cuh's) has no memory clobber: without these
// the compiler could move the slot's stores across the producer's wait or arrive, or the
// consumers' loads above their wait.
__device__ __forceinline__ void compiler_fence() { asm volatile("" ::: "memory"); }

// Producer: unit i's slot, between its empty wait and its full arrive for the unit's first stage.
__device__ __forceinline__ void publish_tile(TileSlot* slots, int i, const UnitTile& w,
                                             const TileRows& rows) {
  compiler_fence();
  slots[i % kTileSlots] = TileSlot{.tile = w.tile, .live = w.live, .rows = rows};
  compiler_fence();
}

// Consumers: unit i's slot, after their full wait for the unit's first stage, read by lane
// `rank` of each warp (the CTA's rank in its cluster, 0 without one) and shuffled to the others.
// Only the lanes that arrive on this CTA's empty barriers have their reads ordered (by the PTX
// memory model) before the producer's next write of the slot: every lane without a cluster, lane
// `rank` in one (common/pipeline.cuh release_stage). With every lane reading, racecheck reported
// the other lanes' reads against that write in a clustered gather kernel (run 39, branch
// wip/gather-clusters), though not yet in these kernels.
__device__ __forceinline__ TileSlot read_tile(const TileSlot* slots, int i, int rank) {
  compiler_fence();
  TileSlot own{};
  if (threadIdx.x % 32 == static_cast<unsigned>(rank)) own = slots[i % kTileSlots];
  auto from_rank = [rank](int v) { return __shfl_sync(~0u, v, rank); };
  return TileSlot{.tile = {.expert = from_rank(own.tile.expert),
                           .m_block = from_rank(own.tile.m_block),
                           .n_block = from_rank(own.tile.n_block)},
                  .live = from_rank(own.live),
                  .rows = {.first = from_rank(own.rows.first), .end = from_rank(own.rows.end)}};
}

}  // namespace moefuse::gemm
