// Work units of the clustered kernels (the FP8 GEMM, the bf16 dgrad): pairs of tiles of one
// expert that the two CTAs of a cluster compute together, sharing one operand by TMA multicast
// (fp8/mainloop.cuh, backward/dgrad_kernel.cuh).
//
// Pure __host__ __device__ arithmetic on top of tile_scheduler.h, unit-tested on the CPU against
// brute force (tests/cpu/gemm_cluster_scheduler_test.cpp).
//
// An expert with m_blocks × n_blocks tiles has ceil(m_blocks · n_blocks / 2) units:
//   * first the m-pairs, floor(m_blocks / 2) · n_blocks units: CTA rank r takes m-block 2i + r of
//     n-block j; both read the same weight tile, so they share B. Ordered as tile_scheduler.h
//     orders tiles, with pairs of m-blocks in place of m-blocks (raster groups of kGroupM / 2
//     pairs, the pair index fastest);
//   * then, only if m_blocks is odd, the last m-block's n-pairs, ceil(n_blocks / 2) units: rank r
//     takes n-block 2j + r of that m-block; both read the same activation rows, so they share A.
//     If n_blocks is odd too, rank 1 of the last unit has no tile (n-block == n_blocks): a
//     phantom that still loads and multicasts its half of A for rank 0 but computes and writes
//     nothing. That is at most one idle tile slot per expert, instead of n_blocks if the odd
//     m-block were paired with nothing.
// Both CTAs of a cluster walk the same units u = cluster, + clusters, ..., so they always run
// the same number of units with the same K blocks (the pipeline's lockstep).
#pragma once

#include <cstdint>

#include "cuda/gemm/tile_scheduler.h"

namespace moefuse::gemm {

inline constexpr int kClusterSize = 2;  // CTAs per cluster, along M (or N for n-pairs)
inline constexpr uint16_t kClusterMask = (1u << kClusterSize) - 1;  // a multicast to both CTAs

// The units a cluster walks (u = first, first + step, ... < total) and this CTA's rank in it.
struct ClusterUnits {
  int first;  // the cluster's index in the grid
  int step;   // clusters in the grid
  int total;  // units of the problem
  int rank;   // this CTA's rank in the cluster
};

struct UnitTile {
  TileCoord tile;  // this CTA's tile (n_block == n_blocks for a phantom)
  bool share_a;    // the pair shares A (an n-pair) rather than B (an m-pair)
  bool live;       // false: a phantom, no tile for this CTA
};

MOEFUSE_HOST_DEVICE constexpr int expert_units(int rows, const TileShape& s) {
  return (expert_tiles(rows, s) + 1) / 2;
}

// Unit `local` of an expert with `m_blocks` m-blocks, as seen by the CTA of cluster rank `rank`.
// s.group_m must be even.
MOEFUSE_HOST_DEVICE inline UnitTile expert_unit_tile(int local, int m_blocks, const TileShape& s,
                                                     int rank) {
  const int m_pairs = m_blocks / 2;
  const int pair_units = m_pairs * s.n_blocks;
  if (local < pair_units) {
    const TileShape pairs{.block_m = 2 * s.block_m, .block_n = s.block_n,
                          .group_m = s.group_m / 2, .n_blocks = s.n_blocks};
    const TileCoord c = expert_tile_coord(local, m_pairs, pairs);
    return UnitTile{.tile = {.expert = 0, .m_block = 2 * c.m_block + rank, .n_block = c.n_block},
                    .share_a = false,
                    .live = true};
  }
  const int n_block = 2 * (local - pair_units) + rank;
  return UnitTile{.tile = {.expert = 0, .m_block = m_blocks - 1, .n_block = n_block},
                  .share_a = true,
                  .live = n_block < s.n_blocks};
}

// Unit u (< unit_start[E]) given the offsets [E+1] and the prefix unit_start [E+1] of
// expert_units (experts without units share the next one's start; find_expert skips them).
MOEFUSE_HOST_DEVICE inline UnitTile unit_tile(int u, const int* offsets, const int* unit_start,
                                              int num_experts, const TileShape& s, int rank) {
  const int e = find_expert(unit_start, num_experts, u);
  const int m_blocks = ceil_div(offsets[e + 1] - offsets[e], s.block_m);
  UnitTile w = expert_unit_tile(u - unit_start[e], m_blocks, s, rank);
  w.tile.expert = e;
  return w;
}

// For kernels instantiated with or without clusters (kCluster 1 or kClusterSize): the units of
// an expert and this CTA's tile of unit u. Without a cluster a unit is one tile (tile_scheduler.h
// order), always live.
template <int kCluster>
MOEFUSE_HOST_DEVICE constexpr int cluster_expert_units(int rows, const TileShape& s) {
  static_assert(kCluster == 1 || kCluster == kClusterSize);
  return kCluster == 1 ? expert_tiles(rows, s) : expert_units(rows, s);
}
template <int kCluster>
MOEFUSE_HOST_DEVICE inline UnitTile cluster_unit_tile(int u, const int* offsets,
                                                      const int* unit_start, int num_experts,
                                                      const TileShape& s, int rank) {
  if constexpr (kCluster == 1)
    return UnitTile{.tile = tile_coord(u, offsets, unit_start, num_experts, s),
                    .share_a = false,
                    .live = true};
  else
    return unit_tile(u, offsets, unit_start, num_experts, s, rank);
}

// Host version of the kernel's prefix (common/warp_prefix.cuh computes the same sums).
inline void unit_starts(const int* offsets, int num_experts, const TileShape& s, int* unit_start) {
  unit_start[0] = 0;
  for (int e = 0; e < num_experts; ++e)
    unit_start[e + 1] = unit_start[e] + expert_units(offsets[e + 1] - offsets[e], s);
}

}  // namespace moefuse::gemm
