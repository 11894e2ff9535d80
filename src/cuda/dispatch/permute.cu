// permute: xs[row_of[t, j]] = x[t]. Token-major: warp t reads x[t] once (4 16-byte vectors per
// lane in flight per chunk) and stores it to its k rows, so the kernel moves (1 + k)·T·H·2 bytes
// instead of the 2·k·T·H of a row-major gather. Blocks past the token blocks zero the rows whose
// token_of_row is -1. Each row is written by exactly one warp: no atomics, deterministic.
#include <cuda_runtime.h>

#include "cuda/check.h"
#include "cuda/dispatch/dispatch_args.h"
#include "cuda/dispatch/rows.cuh"
#include "cuda/router/checks.h"
#include "moefuse/dispatch.h"

namespace moefuse {
namespace cuda {
namespace {

constexpr int kVecsPerLane = 4;

struct PermuteParams {
  const uint4* x;
  const int32_t* row_of;
  const int32_t* token_of_row;
  uint4* xs;
  int tokens, top_k, rows, vecs;
  unsigned token_blocks;
  int32_t* health;
};

__global__ void __launch_bounds__(kRowWarps * 32) permute_kernel(PermuteParams p) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (blockIdx.x >= p.token_blocks) {
    const int first = ((blockIdx.x - p.token_blocks) * kRowWarps + warp) * 32;
    zero_unassigned_rows(p.token_of_row, p.xs, p.rows, p.vecs, p.tokens, first, lane, p.health);
    return;
  }
  const int t = blockIdx.x * kRowWarps + warp;
  if (t >= p.tokens) return;
  const int my_row = load_row(p.row_of, t, p.top_k, lane, p.rows, p.health);
  const uint4* src = p.x + static_cast<int64_t>(t) * p.vecs;
  for (int c0 = 0; c0 < p.vecs; c0 += 32 * kVecsPerLane) {
    uint4 v[kVecsPerLane];
#pragma unroll
    for (int u = 0; u < kVecsPerLane; ++u) {
      const int c = c0 + u * 32 + lane;
      if (c < p.vecs) v[u] = __ldg(src + c);
    }
    for (int j = 0; j < p.top_k; ++j) {
      const int row = __shfl_sync(0xffffffffu, my_row, j);
      if (row < 0) continue;
      uint4* dst = p.xs + static_cast<int64_t>(row) * p.vecs;
#pragma unroll
      for (int u = 0; u < kVecsPerLane; ++u) {
        const int c = c0 + u * 32 + lane;
        if (c < p.vecs) dst[c] = v[u];
      }
    }
  }
}

}  // namespace
}  // namespace cuda

void permute(const TensorView& x, const TensorView& row_of, const TensorView& token_of_row,
             const TensorView& xs, const TensorView& health, cudaStream_t stream) {
  const cuda::RowsShape s = cuda::check_permute(x, row_of, token_of_row, xs);
  int32_t* flag = cuda::expect_health(health);
  const unsigned token_blocks =
      static_cast<unsigned>((s.tokens + cuda::kRowWarps - 1) / cuda::kRowWarps);
  const unsigned blocks = token_blocks + cuda::zero_blocks(s.rows);
  if (blocks == 0) return;
  const cuda::PermuteParams p{
      .x = x.as<const uint4>(),
      .row_of = row_of.as<const int32_t>(),
      .token_of_row = token_of_row.as<const int32_t>(),
      .xs = xs.as<uint4>(),
      .tokens = static_cast<int>(s.tokens),
      .top_k = static_cast<int>(s.top_k),
      .rows = static_cast<int>(s.rows),
      .vecs = static_cast<int>(s.hidden / 8),
      .token_blocks = token_blocks,
      .health = flag,
  };
  cuda::permute_kernel<<<blocks, cuda::kRowWarps * 32, 0, stream>>>(p);
  MOEFUSE_CUDA_CHECK_LAUNCH();
}

}  // namespace moefuse
