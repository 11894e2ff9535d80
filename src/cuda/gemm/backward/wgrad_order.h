// The k-grouped wgrads' tile order: a skewed load's experts longest first, walked in snake rounds.
//
// A wgrad tile of expert e reduces over e's rows, so its cost follows e's row count, while a
// persistent grid hands tiles out statically (no atomics: replays stay deterministic and no
// counter needs resetting inside a CUDA graph). Experts in index order put a skewed routing's
// long experts anywhere, and the CTAs that draw their tiles finish last: modelled with tile cost
// = K blocks + 2, Zipf-routed qwen3-30b-a3b (one expert ~15× the mean) left the busiest of 132
// CTAs 1.10-1.31× the mean load in dW1 and dW2, gpt-oss-120b 1.02-1.07×. Sorting the experts by
// rows, most first, and walking the tiles in snake rounds (below) brings both to ≤ 1.025×; the
// sort alone left 1.07×, the snake alone 1.06-1.45×. Measured on an H200 (run 43, calls 4-5, the
// layer's stages with Zipf routing, three or four interleaved rounds): qwen3 dW2 0.82-0.83×, dW1
// 0.95-0.97×, its step 0.97-0.98×; gpt-oss 0.94-0.95×, 0.97×, 0.985×; the deepseek-v3 slice
// 0.96×, 1.00×, 0.995×; qwen3's FP8 wgrads 0.96-0.97×. Only a skewed load is sorted
// (kSkewedLoad); others keep index order, where the uniform-routing stages read 1.01-1.02× and
// the steps 0.99-1.00× main's (call 5).
//
// Pure __host__ __device__ arithmetic, tested on the CPU (tests/cpu/wgrad_order_test.cpp); the
// kernels' shared-memory fill is order_experts below.
#pragma once

#include <cstdint>

#include "cuda/gemm/tile_scheduler.h"

namespace moefuse::gemm::bwd {

// Round `round` of a persistent grid of `ctas` CTAs holds tiles [round·ctas, (round+1)·ctas):
// CTA `cta` takes tile round·ctas + cta in even rounds and round·ctas + ctas − 1 − cta in odd
// ones. With tiles that get cheaper along the order, the CTA that drew a round's dearest tile
// draws the next round's cheapest, so the CTAs' sums stay level. The last round's tile may lie
// past the end: the caller skips it (and goes on, a later CTA's may not).
MOEFUSE_HOST_DEVICE constexpr int snake_tile(int round, int cta, int ctas) {
  return round * ctas + (round % 2 == 0 ? cta : ctas - 1 - cta);
}

// Expert e's place when the experts are ordered by rows, most first, ties by index: how many
// experts come before it. rows[] may be any array the caller can read (shared memory in the
// kernels).
MOEFUSE_HOST_DEVICE inline int longest_first_rank(const int* rows, int num_experts, int e) {
  const int mine = rows[e];
  int rank = 0;
  for (int f = 0; f < num_experts; ++f) rank += rows[f] > mine || (rows[f] == mine && f < e);
  return rank;
}

// Where the order is worth its walk: a skewed load, the longest expert holding more than
// kSkewedLoad times the mean rows. Under near-uniform routing (max / mean 1.11-1.12) the sorted
// snake walk took qwen3's and gpt-oss's dW2 1.045-1.054× the time of index order (run 43, call
// 4, four rounds; their dW1 0.98-1.02×, the FP8 wgrads 1.00×), for a reason not found (the K
// loop's SASS is main's); Zipf routing (max / mean 6.6-26) gained 0.83-0.96×.
inline constexpr int kSkewedLoad = 2;
MOEFUSE_HOST_DEVICE constexpr bool long_expert(int rows, int num_experts, int total_rows) {
  return int64_t{rows} * num_experts > int64_t{kSkewedLoad} * total_rows;
}

#if defined(__CUDACC__)
// Every thread of the CTA (kThreads of them) calls this, before any role reads `order`: order[i]
// becomes the expert of rank i (longest_first_rank) when the load is skewed, else expert i;
// returns whether it sorted (the walk's snake, which goes with the sort). rows(e) is expert e's
// row count, total_rows their sum. `order` is [E] ints of shared memory, E ≤ kMaxExperts; it
// holds the counts first, each thread keeping the ranks of its experts in registers until every
// thread has read them. Cost: E² / kThreads compares a thread when sorting (estimated ~1 µs at
// E = 128, ~8 µs at 1024, before the producer's first copy; not timed apart).
template <int kThreads, int kMaxExperts, class Rows>
__device__ __forceinline__ bool order_experts(int* order, int num_experts, int total_rows,
                                              Rows&& rows) {
  constexpr int kPerThread = (kMaxExperts + kThreads - 1) / kThreads;
  bool long_one = false;
  for (int e = threadIdx.x; e < num_experts; e += kThreads) {
    const int r = rows(e);
    order[e] = r;
    long_one |= long_expert(r, num_experts, total_rows);
  }
  const bool skewed = __syncthreads_or(long_one);
  int rank[kPerThread];
#pragma unroll
  for (int i = 0; i < kPerThread; ++i) {
    const int e = threadIdx.x + i * kThreads;
    if (e < num_experts) rank[i] = skewed ? longest_first_rank(order, num_experts, e) : e;
  }
  __syncthreads();
#pragma unroll
  for (int i = 0; i < kPerThread; ++i) {
    const int e = threadIdx.x + i * kThreads;
    if (e < num_experts) order[rank[i]] = e;
  }
  __syncthreads();
  return skewed;
}
#endif

}  // namespace moefuse::gemm::bwd
