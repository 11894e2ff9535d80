// An exclusive prefix over the experts of a per-expert count, computed by one warp into shared
// memory at kernel start (the persistent kernels' tile or work-unit starts).
#pragma once

namespace moefuse::gemm {

// Lane l sums count(e) over a contiguous chunk of experts, a warp scan turns the chunk sums into
// chunk starts, and each lane writes start[e + 1] for its experts; start[0] = 0. count(e) is
// evaluated twice per expert (cheap per-expert arithmetic on the offsets).
template <class Count>
__device__ __forceinline__ void warp_exclusive_prefix(int num_experts, Count count, int* start) {
  const int lane = threadIdx.x % 32;
  const int per_lane = (num_experts + 31) / 32;
  const int first = lane * per_lane;
  const int last = min(first + per_lane, num_experts);
  int sum = 0;
  for (int e = first; e < last; ++e) sum += count(e);
  int inclusive = sum;
  for (int delta = 1; delta < 32; delta *= 2) {
    const int up = __shfl_up_sync(0xffffffffu, inclusive, delta);
    if (lane >= delta) inclusive += up;
  }
  int running = inclusive - sum;
  if (lane == 0) start[0] = 0;
  for (int e = first; e < last; ++e) {
    running += count(e);
    start[e + 1] = running;
  }
}

}  // namespace moefuse::gemm
