// The grouped GEMM's tile scheduler: which (expert, m-block, n-block) a linear tile index names.
//
// Pure __host__ __device__ arithmetic, unit-tested on the CPU against brute force
// (tests/cpu/gemm_scheduler_test.cpp). The kernel computes tile_start (the exclusive prefix of
// the per-expert tile counts) from the device-resident offsets at kernel start, then its
// persistent CTAs walk tile = blockIdx.x, blockIdx.x + gridDim.x, ...
//
// Order: experts in turn; inside an expert, m-blocks in groups of `group_m`, and inside a group
// the m-block index runs fastest. The CTAs running at the same time (one per SM) therefore
// cover about num_sms / group_m n-blocks of the expert's weight times group_m m-blocks of its
// rows: both footprints stay in L2 and each weight tile is read from HBM about once per group.
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define MOEFUSE_HOST_DEVICE __host__ __device__
#else
#define MOEFUSE_HOST_DEVICE
#endif

namespace moefuse::gemm {

struct TileShape {
  int block_m;   // rows per tile
  int block_n;   // columns of h per tile
  int group_m;   // m-blocks per raster group
  int n_blocks;  // ceil(N / block_n)
};

struct TileCoord {
  int expert;
  int m_block;  // within the expert
  int n_block;
};

MOEFUSE_HOST_DEVICE constexpr int ceil_div(int a, int b) { return (a + b - 1) / b; }

// Tiles of an expert holding `rows` rows (rows <= 0: none; defends against decreasing offsets).
MOEFUSE_HOST_DEVICE constexpr int expert_tiles(int rows, const TileShape& s) {
  return rows <= 0 ? 0 : ceil_div(rows, s.block_m) * s.n_blocks;
}

// The expert whose tile range holds tile t: the largest e in [0, E) with tile_start[e] <= t.
// tile_start has E + 1 entries and t < tile_start[E]; experts with no tiles share the start of
// the next one, and "largest" skips them.
MOEFUSE_HOST_DEVICE inline int find_expert(const int* tile_start, int num_experts, int t) {
  int lo = 0, hi = num_experts - 1;
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (tile_start[mid] <= t) lo = mid;
    else hi = mid - 1;
  }
  return lo;
}

// Tile `local` of an expert with `m_blocks` m-blocks (0 <= local < m_blocks * n_blocks).
MOEFUSE_HOST_DEVICE inline TileCoord expert_tile_coord(int local, int m_blocks,
                                                       const TileShape& s) {
  const int group_tiles = s.group_m * s.n_blocks;
  const int group = local / group_tiles;
  const int first_m = group * s.group_m;
  const int rest = m_blocks - first_m;
  const int group_size = rest < s.group_m ? rest : s.group_m;
  const int in_group = local - group * group_tiles;
  return TileCoord{.expert = 0,
                   .m_block = first_m + in_group % group_size,
                   .n_block = in_group / group_size};
}

// Tile t (< tile_start[E]) given the offsets [E+1] and the prefix tile_start [E+1].
MOEFUSE_HOST_DEVICE inline TileCoord tile_coord(int t, const int* offsets, const int* tile_start,
                                                int num_experts, const TileShape& s) {
  const int e = find_expert(tile_start, num_experts, t);
  const int m_blocks = ceil_div(offsets[e + 1] - offsets[e], s.block_m);
  TileCoord c = expert_tile_coord(t - tile_start[e], m_blocks, s);
  c.expert = e;
  return c;
}

// Host version of the kernel's prefix (the kernel computes the same sums with a warp scan).
inline void tile_starts(const int* offsets, int num_experts, const TileShape& s, int* tile_start) {
  tile_start[0] = 0;
  for (int e = 0; e < num_experts; ++e)
    tile_start[e + 1] = tile_start[e] + expert_tiles(offsets[e + 1] - offsets[e], s);
}

}  // namespace moefuse::gemm
