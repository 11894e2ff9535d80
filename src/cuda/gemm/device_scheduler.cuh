// The device side of the tile scheduler: the per-CTA prefix of tile counts over the experts,
// computed from the device-resident offsets at kernel start (no host involvement).
#pragma once

#include "cuda/gemm/common/warp_prefix.cuh"
#include "cuda/gemm/tile_scheduler.h"

namespace moefuse::gemm {

// One warp: tile_start[e] = the tiles of experts 0 .. e-1 (common/warp_prefix.cuh). Same sums
// as tile_starts().
__device__ __forceinline__ void warp_tile_starts(const int* offsets, int num_experts,
                                                 const TileShape& shape, int* tile_start) {
  warp_exclusive_prefix(
      num_experts, [&](int e) { return expert_tiles(offsets[e + 1] - offsets[e], shape); },
      tile_start);
}

}  // namespace moefuse::gemm
