// permute: xs[row_of[t, j]] = x[t], by the TMA engine's bulk copies. The kernel moves
// (1 + k)·T·H·2 bytes (each x row read once, written k times) and is write-heavy; a warp of
// 16-byte stores reached only 0.81–0.91 of copy bandwidth (docs/measurements.md, run 7), while
// the read-heavy backward reached 0.90–0.95. Here one thread per block issues whole-row bulk
// copies: x rows into shared memory (cp.async.bulk, completing on an mbarrier), then each row to
// its k destinations (cp.async.bulk shared → global), so the SM's issue slots no longer bound
// the stores and every block keeps a whole group of rows in flight each way.
//
// Persistent grid of one-warp blocks. A block walks token groups g = blockIdx.x + i·gridDim.x
// of `group` tokens through two shared-memory stages:
//   all lanes:  classify row_of for group g (health flag for bad rows) into shared memory;
//   lane 0:     if there is a next group: wait until the stores of the previous group have read
//               their stage (cp.async.bulk.wait_group.read 0), load the next group into it;
//               wait for group g's load (mbarrier of its stage, one phase per use);
//               issue group g's stores, commit them as one bulk group.
// Before that, the block's warp zeroes the rows whose token_of_row is -1 (padding, rows past
// offsets[E]) for its share of 32-row chunks. Each row is written by exactly one copy: no
// atomics, deterministic.
#include <cuda_runtime.h>

#include <algorithm>

#include <cute/arch/copy_sm90_tma.hpp>
#include <cutlass/arch/barrier.h>

#include "cuda/check.h"
#include "cuda/dispatch/dispatch_args.h"
#include "cuda/dispatch/rows.cuh"
#include "cuda/router/checks.h"
#include "moefuse/dispatch.h"
#include "moefuse/error.h"

namespace moefuse {
namespace cuda {
namespace {

using cutlass::arch::ClusterBarrier;
using cutlass::arch::ClusterTransactionBarrier;

constexpr int kStages = 2;
constexpr int kMaxGroupTokens = 8;
// Bytes of x rows a stage aims to hold: enough in flight per block that 3–4 blocks an SM cover
// HBM latency, small enough that they fit.
constexpr int64_t kStageBytesTarget = 32 * 1024;
constexpr int64_t kMaxDynamicSmem = 227 * 1024;

struct PermuteParams {
  const uint8_t* x;
  const int32_t* row_of;
  const int32_t* token_of_row;
  uint8_t* xs;
  int tokens, top_k, rows, vecs;
  int row_bytes;     // H·2, a multiple of 16
  int group;         // tokens per group (≤ kMaxGroupTokens)
  int groups;        // ceil(tokens / group)
  int zero_chunks;   // ceil(rows / 32)
  int32_t* health;
};

// Tokens per group for rows of `row_bytes`: about kStageBytesTarget a stage, 1..kMaxGroupTokens.
int64_t group_tokens(int64_t row_bytes) {
  return std::clamp<int64_t>(kStageBytesTarget / row_bytes, 1, kMaxGroupTokens);
}

// Lane 0: loads the x rows of group g into stage `stage`, completing on `bar`.
__device__ __forceinline__ void load_group(const PermuteParams& p, int g, uint8_t* stage,
                                           uint64_t* bar) {
  const int t0 = g * p.group;
  const int n = min(p.group, p.tokens - t0);
  ClusterTransactionBarrier::arrive_and_expect_tx(bar, static_cast<uint32_t>(n * p.row_bytes));
  for (int i = 0; i < n; ++i)
    cute::SM90_BULK_COPY_G2S::copy(p.x + static_cast<int64_t>(t0 + i) * p.row_bytes, bar,
                                   stage + i * p.row_bytes, p.row_bytes);
}

__global__ void __launch_bounds__(32) permute_kernel(PermuteParams p) {
  extern __shared__ __align__(128) uint8_t smem[];
  __shared__ __align__(8) uint64_t bars[kStages];
  __shared__ int rows_s[kMaxGroupTokens * kDispatchMaxTopK];
  const int lane = threadIdx.x;

  for (int c = blockIdx.x; c < p.zero_chunks; c += gridDim.x)
    zero_unassigned_rows(p.token_of_row, reinterpret_cast<uint4*>(p.xs), p.rows, p.vecs, p.tokens,
                         c * 32, lane, p.health);

  const int stage_bytes = p.group * p.row_bytes;
  if (lane == 0) {
    for (int s = 0; s < kStages; ++s) ClusterBarrier::init(&bars[s], 1);
    cutlass::arch::fence_barrier_init();
    if (blockIdx.x < p.groups) load_group(p, blockIdx.x, smem, &bars[0]);
  }
  __syncwarp();

  uint32_t phases = 0;  // bit s: the parity of stage s's next completion
  for (int g = blockIdx.x, it = 0; g < p.groups; g += gridDim.x, ++it) {
    const int s = it % kStages;
    const int t0 = g * p.group;
    const int n = min(p.group, p.tokens - t0);
    // Lane 0 finished reading rows_s (the previous group's stores) before the __syncwarp below.
    for (int e = lane; e < n * p.top_k; e += 32)
      rows_s[e] = usable_row(p.row_of[static_cast<int64_t>(t0) * p.top_k + e], p.rows, p.health);
    __syncwarp();
    if (lane == 0) {
      const int next = g + gridDim.x;
      if (next < p.groups) {
        cute::tma_store_wait<0>();  // the stage's last stores (group it - 1) have read it
        load_group(p, next, smem + (s ^ 1) * stage_bytes, &bars[s ^ 1]);
      }
      ClusterBarrier::wait(&bars[s], (phases >> s) & 1u);
      phases ^= 1u << s;
      cute::tma_store_fence();  // order the completed load before the stores that read it
      const uint8_t* stage = smem + s * stage_bytes;
      for (int e = 0; e < n * p.top_k; ++e) {
        const int row = rows_s[e];
        if (row >= 0)
          cute::SM90_BULK_COPY_S2G::copy(stage + (e / p.top_k) * p.row_bytes,
                                         p.xs + static_cast<int64_t>(row) * p.row_bytes,
                                         p.row_bytes);
      }
      cute::tma_store_arrive();
    }
    __syncwarp();
  }
  // The stores must have finished reading shared memory before the block's smem is released.
  if (lane == 0) cute::tma_store_wait<0>();
}

}  // namespace
}  // namespace cuda

void permute(const TensorView& x, const TensorView& row_of, const TensorView& token_of_row,
             const TensorView& xs, const TensorView& health, cudaStream_t stream) {
  const cuda::RowsShape s = cuda::check_permute(x, row_of, token_of_row, xs);
  int32_t* flag = cuda::expect_health(health);
  const int64_t row_bytes = s.hidden * 2;
  const int64_t group = cuda::group_tokens(row_bytes);
  const int64_t smem = cuda::kStages * group * row_bytes;
  MOEFUSE_EXPECT(smem <= cuda::kMaxDynamicSmem, "x.shape[1]",
                 "a hidden size of at most " +
                     std::to_string(cuda::kMaxDynamicSmem / (cuda::kStages * 2)) +
                     " (two rows in shared memory)",
                 std::to_string(s.hidden));
  const int groups = static_cast<int>((s.tokens + group - 1) / group);
  const int zero_chunks = static_cast<int>((s.rows + 31) / 32);
  if (groups == 0 && zero_chunks == 0) return;

  MOEFUSE_CUDA_CHECK(cudaFuncSetAttribute(cuda::permute_kernel,
                                          cudaFuncAttributeMaxDynamicSharedMemorySize,
                                          static_cast<int>(smem)));
  int device = 0, sms = 0, per_sm = 0;
  MOEFUSE_CUDA_CHECK(cudaGetDevice(&device));
  MOEFUSE_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  MOEFUSE_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, cuda::permute_kernel,
                                                                   32, static_cast<size_t>(smem)));
  const int blocks = std::max(1, std::min(std::max(groups, zero_chunks), sms * std::max(per_sm, 1)));
  const cuda::PermuteParams p{
      .x = x.as<const uint8_t>(),
      .row_of = row_of.as<const int32_t>(),
      .token_of_row = token_of_row.as<const int32_t>(),
      .xs = xs.as<uint8_t>(),
      .tokens = static_cast<int>(s.tokens),
      .top_k = static_cast<int>(s.top_k),
      .rows = static_cast<int>(s.rows),
      .vecs = static_cast<int>(s.hidden / 8),
      .row_bytes = static_cast<int>(row_bytes),
      .group = static_cast<int>(group),
      .groups = groups,
      .zero_chunks = zero_chunks,
      .health = flag,
  };
  cuda::permute_kernel<<<blocks, 32, smem, stream>>>(p);
  MOEFUSE_CUDA_CHECK_LAUNCH();
}

}  // namespace moefuse
