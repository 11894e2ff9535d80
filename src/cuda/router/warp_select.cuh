// Warp-wide selection helpers of the router kernels: an arg-max over ordered_key keys with the
// reference's tie rule (higher score first, equal scores lower index first), and warp sums.
#pragma once

#include <cstdint>

#include "cuda/router/ordered_key.h"

namespace moefuse::cuda {

inline constexpr unsigned kFullMask = 0xffffffffu;

template <class Key>
struct ArgMax {
  Key key;         // the best key of the warp (kNoCandidateKey when no lane had a candidate)
  unsigned index;  // the lowest index holding it
};

// Every lane offers (key, index); all lanes get the best key and the lowest index among the lanes
// that hold it. Three redux instructions instead of a shuffle tree (two for 32-bit keys).
__device__ __forceinline__ ArgMax<uint64_t> warp_argmax(uint64_t key, unsigned index) {
  const unsigned hi = static_cast<unsigned>(key >> 32), lo = static_cast<unsigned>(key);
  const unsigned best_hi = __reduce_max_sync(kFullMask, hi);
  const unsigned best_lo = __reduce_max_sync(kFullMask, hi == best_hi ? lo : 0u);
  const bool holds = hi == best_hi && lo == best_lo;
  const unsigned best_index = __reduce_min_sync(kFullMask, holds ? index : ~0u);
  return {.key = (uint64_t{best_hi} << 32) | best_lo, .index = best_index};
}
__device__ __forceinline__ ArgMax<uint32_t> warp_argmax(uint32_t key, unsigned index) {
  const unsigned best = __reduce_max_sync(kFullMask, key);
  return {.key = best, .index = __reduce_min_sync(kFullMask, key == best ? index : ~0u)};
}

// Butterfly sums: every lane ends with the same bits (a + b == b + a exactly), so the result
// does not depend on the lane that later writes it.
template <class T>
__device__ __forceinline__ T warp_sum(T v) {
#pragma unroll
  for (int d = 16; d > 0; d /= 2) v += __shfl_xor_sync(kFullMask, v, d);
  return v;
}

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int d = 16; d > 0; d /= 2) v = fmaxf(v, __shfl_xor_sync(kFullMask, v, d));
  return v;
}

}  // namespace moefuse::cuda
