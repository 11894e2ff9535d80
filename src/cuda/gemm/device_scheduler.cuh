// The device side of the tile scheduler: the per-CTA prefix of tile counts over the experts,
// computed from the device-resident offsets at kernel start (no host involvement).
#pragma once

#include "cuda/gemm/tile_scheduler.h"

namespace moefuse::gemm {

// One warp: lane l sums the tiles of a contiguous chunk of experts, a warp scan turns the chunk
// sums into chunk starts, and each lane writes its experts' starts. Same sums as tile_starts().
__device__ __forceinline__ void warp_tile_starts(const int* offsets, int num_experts,
                                                 const TileShape& shape, int* tile_start) {
  const int lane = threadIdx.x % 32;
  const int per_lane = (num_experts + 31) / 32;
  const int first = lane * per_lane;
  const int last = min(first + per_lane, num_experts);
  int sum = 0;
  for (int e = first; e < last; ++e) sum += expert_tiles(offsets[e + 1] - offsets[e], shape);
  int inclusive = sum;
  for (int delta = 1; delta < 32; delta *= 2) {
    const int up = __shfl_up_sync(0xffffffffu, inclusive, delta);
    if (lane >= delta) inclusive += up;
  }
  int running = inclusive - sum;
  if (lane == 0) tile_start[0] = 0;
  for (int e = first; e < last; ++e) {
    running += expert_tiles(offsets[e + 1] - offsets[e], shape);
    tile_start[e + 1] = running;
  }
}

}  // namespace moefuse::gemm
