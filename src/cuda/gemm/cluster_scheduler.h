// Work units of the clustered kernels (the FP8 GEMM, the bf16 forward, the bf16 dGLU dgrad):
// groups of kCluster tiles of one expert that the CTAs of a cluster compute together, sharing one
// operand by TMA multicast (fp8/mainloop.cuh, mainloop.cuh, backward/dgrad_kernel.cuh). Every
// kernel runs pairs (kClusterSize); the arithmetic holds for fours too, which the CPU tests
// cover, but the dGLU dgrad in fours measured slower than in pairs (run 18,
// docs/grouped_gemm_backward.md).
//
// Pure __host__ __device__ arithmetic on top of tile_scheduler.h, unit-tested on the CPU against
// brute force (tests/cpu/gemm_cluster_scheduler_test.cpp).
//
// An expert with m_blocks × n_blocks tiles has
// floor(m_blocks / kCluster) · n_blocks + (m_blocks % kCluster) · ceil(n_blocks / kCluster) units:
//   * first the m-groups, floor(m_blocks / kCluster) · n_blocks units: CTA rank r takes m-block
//     kCluster·i + r of n-block j; all read the same weight tile, so they share B. Ordered as
//     tile_scheduler.h orders tiles, with groups of kCluster m-blocks in place of m-blocks (raster
//     groups of group_m / kCluster m-groups, the m-group index fastest);
//   * then each of the m_blocks % kCluster left-over m-blocks in turn, as ceil(n_blocks /
//     kCluster) n-groups: rank r takes n-block kCluster·j + r of that m-block; all read the same
//     activation rows, so they share A. Where n_blocks is not a multiple of kCluster, the ranks of
//     the last n-group past the last n-block have no tile (n-block >= n_blocks): phantoms that
//     still load and multicast their piece of A for the others but compute and write nothing.
//     That is at most kCluster - 1 idle tile slots per left-over m-block, instead of n_blocks if
//     the m-block were grouped with nothing.
// With UnitPairs::kNGroupsOnly there are no m-groups: every m-block runs as n-groups (in raster
// order, as tile_scheduler.h orders tiles), so the ranks of a unit always compute the same rows
// side by side. The FP8 GEMM's E4M3 GLU output needs that: a 1x128 scale group of act spans the
// outputs of n-blocks 2j and 2j + 1 (fp8/e4m3_drain.cuh).
// All CTAs of a cluster walk the same units u = cluster, + clusters, ..., so they always run the
// same number of units with the same K blocks (the pipeline's lockstep). Rank 0 always has a
// tile.
#pragma once

#include <cstdint>

#include "cuda/gemm/tile_scheduler.h"

namespace moefuse::gemm {

inline constexpr int kClusterSize = 2;  // CTAs per cluster of the 2-CTA kernels

// A multicast to every CTA of a kCluster-CTA cluster (1: no cluster, never multicast).
template <int kCluster>
MOEFUSE_HOST_DEVICE constexpr uint16_t cluster_mask() {
  static_assert(kCluster == 1 || kCluster == 2 || kCluster == 4, "clusters of 2 or 4 CTAs");
  return static_cast<uint16_t>((1u << kCluster) - 1);
}
inline constexpr uint16_t kClusterMask = cluster_mask<kClusterSize>();

// How an expert's tiles form units (the header comment).
enum class UnitPairs : uint8_t {
  kMGroupsFirst,  // m-groups sharing B, then the left-over m-blocks as n-groups sharing A
  kNGroupsOnly,   // every m-block as n-groups sharing A
};

// The units a cluster walks (u = first, first + step, ... < total) and this CTA's rank in it.
struct ClusterUnits {
  int first;  // the cluster's index in the grid
  int step;   // clusters in the grid
  int total;  // units of the problem
  int rank;   // this CTA's rank in the cluster
};

struct UnitTile {
  TileCoord tile;  // this CTA's tile (n_block >= n_blocks for a phantom)
  bool share_a;    // the group shares A (an n-group) rather than B (an m-group)
  bool live;       // false: a phantom, no tile for this CTA
};

// The m-groups of an expert with m_blocks m-blocks.
template <int kCluster>
MOEFUSE_HOST_DEVICE constexpr int m_groups_of(int m_blocks, UnitPairs pairs) {
  return pairs == UnitPairs::kNGroupsOnly ? 0 : m_blocks / kCluster;
}

template <int kCluster = kClusterSize>
MOEFUSE_HOST_DEVICE constexpr int expert_units(int rows, const TileShape& s,
                                               UnitPairs pairs = UnitPairs::kMGroupsFirst) {
  const int m_blocks = rows <= 0 ? 0 : ceil_div(rows, s.block_m);
  const int m_groups = m_groups_of<kCluster>(m_blocks, pairs);
  const int left_over = m_blocks - kCluster * m_groups;  // m-blocks run as n-groups
  return m_groups * s.n_blocks + left_over * ceil_div(s.n_blocks, kCluster);
}

// An upper bound of the units of E experts with `tiles` tiles in all, m-groups first: an expert's
// units are at most (its tiles + (kCluster - 1)²) / kCluster (each left-over m-block pads its
// n-groups by at most kCluster - 1 tiles). For the host's grid size only.
template <int kCluster>
constexpr int64_t max_units(int64_t tiles, int64_t num_experts) {
  return (tiles + num_experts * (kCluster - 1) * (kCluster - 1) + kCluster - 1) / kCluster;
}

// Unit `local` of an expert with `m_blocks` m-blocks, as seen by the CTA of cluster rank `rank`.
// s.group_m must be a multiple of kCluster.
template <int kCluster = kClusterSize>
MOEFUSE_HOST_DEVICE inline UnitTile expert_unit_tile(int local, int m_blocks, const TileShape& s,
                                                     int rank,
                                                     UnitPairs pairs = UnitPairs::kMGroupsFirst) {
  const int m_groups = m_groups_of<kCluster>(m_blocks, pairs);
  const int group_units = m_groups * s.n_blocks;
  if (local < group_units) {
    const TileShape groups{.block_m = kCluster * s.block_m, .block_n = s.block_n,
                           .group_m = s.group_m / kCluster, .n_blocks = s.n_blocks};
    const TileCoord c = expert_tile_coord(local, m_groups, groups);
    return UnitTile{
        .tile = {.expert = 0, .m_block = kCluster * c.m_block + rank, .n_block = c.n_block},
        .share_a = false,
        .live = true};
  }
  const int n_groups = ceil_div(s.n_blocks, kCluster);
  const int rest = local - group_units;
  if (pairs == UnitPairs::kNGroupsOnly) {
    // Ordered as tile_scheduler.h orders tiles, with n-groups in place of n-blocks (raster groups
    // of group_m m-blocks, the m-block fastest): the clusters running side by side then read a
    // few weight tiles, not all of an expert's (mixtral's FC1 has 224 n-blocks of 512 KB each),
    // which L2 keeps.
    const TileShape groups{.block_m = s.block_m, .block_n = kCluster * s.block_n,
                           .group_m = s.group_m, .n_blocks = n_groups};
    const TileCoord c = expert_tile_coord(rest, m_blocks, groups);
    const int n_block = kCluster * c.n_block + rank;
    return UnitTile{.tile = {.expert = 0, .m_block = c.m_block, .n_block = n_block},
                    .share_a = true,
                    .live = n_block < s.n_blocks};
  }
  const int n_block = kCluster * (rest % n_groups) + rank;
  return UnitTile{.tile = {.expert = 0,
                           .m_block = kCluster * m_groups + rest / n_groups,
                           .n_block = n_block},
                  .share_a = true,
                  .live = n_block < s.n_blocks};
}

// Unit u (< unit_start[E]) given the offsets [E+1] and the prefix unit_start [E+1] of
// expert_units (experts without units share the next one's start; find_expert skips them).
template <int kCluster = kClusterSize>
MOEFUSE_HOST_DEVICE inline UnitTile unit_tile(int u, const int* offsets, const int* unit_start,
                                              int num_experts, const TileShape& s, int rank,
                                              UnitPairs pairs = UnitPairs::kMGroupsFirst) {
  const int e = find_expert(unit_start, num_experts, u);
  const int m_blocks = ceil_div(offsets[e + 1] - offsets[e], s.block_m);
  UnitTile w = expert_unit_tile<kCluster>(u - unit_start[e], m_blocks, s, rank, pairs);
  w.tile.expert = e;
  return w;
}

// For kernels instantiated with or without clusters (kCluster 1, 2 or 4): the units of an
// expert and this CTA's tile of unit u. Without a cluster a unit is one tile (tile_scheduler.h
// order), always live.
template <int kCluster>
MOEFUSE_HOST_DEVICE constexpr int cluster_expert_units(int rows, const TileShape& s) {
  if constexpr (kCluster == 1) return expert_tiles(rows, s);
  else return expert_units<kCluster>(rows, s);
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
    return unit_tile<kCluster>(u, offsets, unit_start, num_experts, s, rank);
}

// Host version of the kernel's prefix (common/warp_prefix.cuh computes the same sums).
template <int kCluster = kClusterSize>
inline void unit_starts(const int* offsets, int num_experts, const TileShape& s, int* unit_start,
                        UnitPairs pairs = UnitPairs::kMGroupsFirst) {
  unit_start[0] = 0;
  for (int e = 0; e < num_experts; ++e)
    unit_start[e + 1] =
        unit_start[e] + expert_units<kCluster>(offsets[e + 1] - offsets[e], s, pairs);
}

}  // namespace moefuse::gemm
