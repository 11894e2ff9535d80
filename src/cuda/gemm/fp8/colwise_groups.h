// Group indexing of the column-wise grouped FP8 layout (moefuse/grouped_gemm_fp8_wgrad.h): expert
// e's rows split into groups of 128 from its first row, its groups numbered from
// group_start[e] = Σ_{e' < e} ceil(m_e' / 128).
//
// group_start is the tile scheduler's prefix (tile_scheduler.h) with 128-row "tiles" and one
// column block: tile_starts on the host, warp_tile_starts on the device compute it with the same
// sums, so the quantiser and the GEMM agree by construction. Pure __host__ __device__
// arithmetic, unit-tested on the CPU against brute force (tests/cpu/ref_grouped_gemm_fp8_wgrad_test.cpp).
#pragma once

#include "cuda/gemm/tile_scheduler.h"

namespace moefuse::gemm::fp8 {

inline constexpr int kColwiseGroup = 128;

// expert_tiles(rows, colwise_group_shape()) = ceil(rows / 128) (0 for rows <= 0). A function, so
// that device code can pass it by reference without a device-side variable.
MOEFUSE_HOST_DEVICE constexpr TileShape colwise_group_shape() {
  return TileShape{.block_m = kColwiseGroup, .block_n = 1, .group_m = 1, .n_blocks = 1};
}

// Global group G (< group_start[E]) of the layout: its expert, its index within the expert, and
// the rows it covers, [first_row, first_row + rows).
struct ColwiseGroup {
  int expert;
  int group;
  int first_row;
  int rows;  // 1 .. 128
};

MOEFUSE_HOST_DEVICE inline ColwiseGroup colwise_group(int g, const int* offsets,
                                                      const int* group_start, int num_experts) {
  const int e = find_expert(group_start, num_experts, g);
  const int in_expert = g - group_start[e];
  const int first = offsets[e] + kColwiseGroup * in_expert;
  const int left = offsets[e + 1] - first;
  return ColwiseGroup{.expert = e,
                      .group = in_expert,
                      .first_row = first,
                      .rows = left < kColwiseGroup ? left : kColwiseGroup};
}

// The column of xt holding row `row` of expert e (offsets[e] <= row < offsets[e+1]).
MOEFUSE_HOST_DEVICE inline int colwise_column(int row, int e, const int* offsets,
                                              const int* group_start) {
  return kColwiseGroup * group_start[e] + (row - offsets[e]);
}

}  // namespace moefuse::gemm::fp8
