// dispatch_maps: offsets, row_of and token_of_row from expert_idx, with row positions that never
// depend on the order of atomics. The T tokens are cut into NC chunks of C consecutive tokens.
//   1. chunk_histogram_kernel (NC blocks): hist[c, e] = assignments of expert e in chunk c
//      (shared-memory integer adds: the count does not depend on their order).
//   2. chunk_scan_kernel (ceil(E/32) blocks of 32×32): base[c, e] = Σ_{c'<c} hist[c', e] in
//      place, and counts[e] = Σ_c hist[c, e].
//   3. place_kernel (max(NC, 1) blocks of 256): every block scans the counts into the offsets
//      (block 0 writes them and the padding rows' -1), then walks its chunk's assignments in
//      flattened (t, j) order, 256 at a time: __match_any_sync groups the lanes of a warp by
//      expert, the rank inside the group plus the groups of earlier warps (shared memory) plus
//      the running per-expert cursor give each assignment its row. All blocks write -1 into the
//      rows past offsets[E].
// Row of (t, j) with expert e = offsets[e] + base[chunk(t), e] + (assignments of e earlier in
// the chunk): the reference's stable order, for any chunk size.
#include <cuda_runtime.h>

#include <algorithm>

#include "cuda/check.h"
#include "cuda/device.h"
#include "cuda/dispatch/dispatch_args.h"
#include "cuda/dispatch/offsets_scan.cuh"
#include "cuda/router/checks.h"
#include "moefuse/dispatch.h"
#include "moefuse/health.h"

namespace moefuse {
namespace cuda {
namespace {

constexpr int kMaxChunks = 256;
constexpr int kMinChunkTokens = 16;
constexpr int kPlaceWarps = kScanThreads / 32;
constexpr unsigned kFull = 0xffffffffu;

struct Chunking {
  int chunk_tokens, chunks;
};

Chunking chunking(int64_t tokens) {
  const int64_t c = std::max<int64_t>(kMinChunkTokens, (tokens + kMaxChunks - 1) / kMaxChunks);
  return {.chunk_tokens = static_cast<int>(c), .chunks = static_cast<int>((tokens + c - 1) / c)};
}

struct MapsParams {
  const int32_t* expert_idx;
  int tokens, top_k, experts, align, rows;
  int chunk_tokens, chunks;
  int32_t* base;    // [NC, E]: hist, then the exclusive prefix over chunks
  int32_t* counts;  // [E]
  int32_t* offsets;
  int32_t* row_of;
  int32_t* token_of_row;
  int32_t* health;
};

__device__ __forceinline__ int64_t chunk_begin(const MapsParams& p, int c) {
  return static_cast<int64_t>(c) * p.chunk_tokens * p.top_k;
}
__device__ __forceinline__ int64_t chunk_end(const MapsParams& p, int c) {
  return static_cast<int64_t>(min(p.tokens, (c + 1) * p.chunk_tokens)) * p.top_k;
}

__global__ void __launch_bounds__(256) chunk_histogram_kernel(MapsParams p) {
  extern __shared__ int s_hist[];  // [E]
  for (int e = threadIdx.x; e < p.experts; e += blockDim.x) s_hist[e] = 0;
  __syncthreads();
  const int c = blockIdx.x;
  for (int64_t a = chunk_begin(p, c) + threadIdx.x; a < chunk_end(p, c); a += blockDim.x) {
    const int e = p.expert_idx[a];
    if (e >= 0 && e < p.experts) atomicAdd(&s_hist[e], 1);
  }
  __syncthreads();
  for (int e = threadIdx.x; e < p.experts; e += blockDim.x)
    p.base[static_cast<int64_t>(c) * p.experts + e] = s_hist[e];
}

// Thread (x, y): expert 32·blockIdx.x + x, chunks [y·per, (y+1)·per).
__global__ void __launch_bounds__(1024) chunk_scan_kernel(MapsParams p) {
  __shared__ int s_sum[32][33];
  const int x = threadIdx.x, y = threadIdx.y;
  const int e = blockIdx.x * 32 + x;
  const int per = (p.chunks + 31) / 32;
  const int c_begin = min(p.chunks, y * per), c_end = min(p.chunks, (y + 1) * per);
  int local = 0;
  if (e < p.experts)
    for (int c = c_begin; c < c_end; ++c) local += p.base[static_cast<int64_t>(c) * p.experts + e];
  s_sum[y][x] = local;
  __syncthreads();
  if (y == 0) {
    int run = 0;
    for (int i = 0; i < 32; ++i) {
      const int v = s_sum[i][x];
      s_sum[i][x] = run;
      run += v;
    }
    if (e < p.experts) p.counts[e] = run;
  }
  __syncthreads();
  if (e >= p.experts) return;
  int run = s_sum[y][x];
  for (int c = c_begin; c < c_end; ++c) {
    int32_t& slot = p.base[static_cast<int64_t>(c) * p.experts + e];
    const int h = slot;
    slot = run;
    run += h;
  }
}

__global__ void __launch_bounds__(kScanThreads) place_kernel(MapsParams p) {
  __shared__ OffsetsScan::TempStorage scan_storage;
  extern __shared__ int smem[];
  const int E = p.experts;
  int* s_off = smem;                 // [E+1]
  int* s_run = s_off + E + 1;        // [E]: next row of each expert in this chunk
  int* s_warp = s_run + E;           // [kPlaceWarps, E]: assignments per warp in this pass
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int c = blockIdx.x;

  const int total = scan_offsets(scan_storage, p.counts, p.align, E, s_off);
  __syncthreads();
  if (c == 0) {
    for (int i = threadIdx.x; i <= E; i += blockDim.x) p.offsets[i] = s_off[i];
    for (int e = threadIdx.x; e < E; e += blockDim.x)
      for (int r = s_off[e] + p.counts[e]; r < s_off[e + 1] && r < p.rows; ++r)
        p.token_of_row[r] = -1;
    if (threadIdx.x == 0 && total > p.rows && p.health)
      atomicOr(p.health, kHealthRowsOverflow);
  }
  for (int r = total + blockIdx.x * blockDim.x + threadIdx.x; r < p.rows;
       r += gridDim.x * blockDim.x)
    p.token_of_row[r] = -1;
  if (c >= p.chunks) return;

  for (int e = threadIdx.x; e < E; e += blockDim.x)
    s_run[e] = s_off[e] + p.base[static_cast<int64_t>(c) * E + e];
  for (int i = threadIdx.x; i < kPlaceWarps * E; i += blockDim.x) s_warp[i] = 0;
  __syncthreads();

  const unsigned lanes_below = (1u << lane) - 1;
  const int64_t end = chunk_end(p, c);
  for (int64_t a0 = chunk_begin(p, c); a0 < end; a0 += blockDim.x) {
    const int64_t a = a0 + threadIdx.x;
    const bool live = a < end;
    const int e = live ? p.expert_idx[a] : -1;
    const bool valid = live && e >= 0 && e < E;
    if (live && !valid) {
      p.row_of[a] = -1;
      if (p.health) atomicOr(p.health, kHealthExpertOutOfRange);
    }
    const unsigned peers = __match_any_sync(kFull, valid ? e : -1);
    const int rank = __popc(peers & lanes_below);
    const bool leader = rank == 0;
    if (valid && leader) s_warp[warp * E + e] = __popc(peers);
    __syncthreads();
    if (valid) {
      int row = s_run[e] + rank;
      for (int w = 0; w < warp; ++w) row += s_warp[w * E + e];
      if (row < p.rows) {
        p.row_of[a] = row;
        p.token_of_row[row] = static_cast<int32_t>(a / p.top_k);
      } else {
        p.row_of[a] = -1;
        if (p.health) atomicOr(p.health, kHealthRowsOverflow);
      }
    }
    __syncthreads();
    if (valid && leader) {
      atomicAdd(&s_run[e], __popc(peers));  // integer adds: order-free
      s_warp[warp * E + e] = 0;
    }
    __syncthreads();
  }
}

}  // namespace
}  // namespace cuda

size_t dispatch_maps_workspace_size(int64_t tokens, int64_t num_experts) {
  cuda::expect_in_range(tokens, "tokens", 0, INT32_MAX);
  cuda::expect_in_range(num_experts, "num_experts", 1, kDispatchMaxExperts);
  const cuda::Chunking ch = cuda::chunking(tokens);
  return cuda::align_bytes(sizeof(int32_t) * static_cast<size_t>(ch.chunks) * num_experts) +
         cuda::align_bytes(sizeof(int32_t) * static_cast<size_t>(num_experts));
}

void dispatch_maps(const TensorView& expert_idx, int64_t num_experts, int64_t align,
                   const DispatchMaps& maps, const TensorView& health, Workspace workspace,
                   cudaStream_t stream) {
  const cuda::MapsShape s = cuda::check_dispatch_maps(expert_idx, num_experts, align, maps);
  int32_t* flag = cuda::expect_health(health);
  cuda::expect_workspace(workspace, dispatch_maps_workspace_size(s.tokens, s.experts));
  cuda::expect_launchable(stream);
  const cuda::Chunking ch = cuda::chunking(s.tokens);
  auto* base = static_cast<int32_t*>(workspace.data);
  const cuda::MapsParams p{
      .expert_idx = expert_idx.as<const int32_t>(),
      .tokens = static_cast<int>(s.tokens),
      .top_k = static_cast<int>(s.top_k),
      .experts = static_cast<int>(s.experts),
      .align = static_cast<int>(align),
      .rows = static_cast<int>(s.rows),
      .chunk_tokens = ch.chunk_tokens,
      .chunks = ch.chunks,
      .base = base,
      .counts = reinterpret_cast<int32_t*>(
          static_cast<unsigned char*>(workspace.data) +
          cuda::align_bytes(sizeof(int32_t) * static_cast<size_t>(ch.chunks) * s.experts)),
      .offsets = maps.offsets.as<int32_t>(),
      .row_of = maps.row_of.as<int32_t>(),
      .token_of_row = maps.token_of_row.as<int32_t>(),
      .health = flag,
  };
  const size_t E = static_cast<size_t>(s.experts);
  if (ch.chunks > 0) {
    cuda::chunk_histogram_kernel<<<ch.chunks, 256, sizeof(int) * E, stream>>>(p);
    MOEFUSE_CUDA_CHECK_LAUNCH();
  }
  cuda::chunk_scan_kernel<<<static_cast<unsigned>((E + 31) / 32), dim3(32, 32), 0, stream>>>(p);
  MOEFUSE_CUDA_CHECK_LAUNCH();
  const size_t place_smem = sizeof(int) * ((E + 1) + E + cuda::kPlaceWarps * E);
  if (place_smem > 48 * 1024)
    MOEFUSE_CUDA_CHECK(cudaFuncSetAttribute(cuda::place_kernel,
                                            cudaFuncAttributeMaxDynamicSharedMemorySize,
                                            static_cast<int>(place_smem)));
  cuda::place_kernel<<<std::max(ch.chunks, 1), cuda::kScanThreads, place_smem, stream>>>(p);
  MOEFUSE_CUDA_CHECK_LAUNCH();
}

}  // namespace moefuse
