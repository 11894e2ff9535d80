// permute_backward_router: permute_backward_add with the router's share of dx added in the same
// pass, dx[t] = Σ_j dxs[row_of[t, j]] + add[t] + bf16(d_logits[t]) · w_router, rounded once.
//
// Why: the router's dx GEMM (K = E: a few GFLOP) otherwise reads dx back and writes it again
// after permute_backward wrote it, 2·T·H·2 bytes at cuBLAS's ~2.4 TB/s (57 µs on qwen3, 79 on
// gpt-oss, 189 on the deepseek slice: run 34). Here its product never leaves the SM, and the pass
// moves the bytes of permute_backward_add alone.
//
// Work items: tiles of kTileTokens tokens × kTileCols columns, the column chunk fastest (w_router,
// E·H·2 bytes, stays in L2 throughout). Where a row is a whole number of 256-byte units, block b
// takes the contiguous range of items [b·n/G, (b+1)·n/G) (n items, G blocks): its items run
// through the chunks of one token tile before the next, so the tile's rows (row_of) are staged
// once for all its chunks. Otherwise it takes items b + i·G (contiguous_items says why). Warp
// roles in a block:
//   - 4 product warps: P = d_logits · w_router for each item on the tensor cores (mma.sync
//     m16n8k16, bf16 in, fp32 accumulate), K = E in pieces of kPieceK: each piece of d_logits
//     (fp32, rounded to bf16 as the A fragments are built, as router_logits_backward rounds it)
//     and of w_router staged in shared memory by cp.async, the next piece's copies in flight
//     while this one computes (two stages); w_router's [E, H] rows give the K-major B fragments
//     through ldmatrix.trans. Warp w owns m16 tile w % 2 and n8 tiles 8·(w / 2) .. + 7. P goes
//     to one of two shared buffers, so they run up to two items ahead;
//   - 8 gather warps: half-warp h of gather warp w takes the item's tokens 4w + h and 4w + 2 + h,
//     lane l % 16 one 16-byte vector (8 columns) of each; Σ_j dxs rows in j order in fp32 (as
//     permute_backward), + add, + P, one rounding. Each dx element is written by one thread: no
//     atomics, deterministic, and add may be dx itself (read before written).
// The two roles hand the P buffers over by mbarriers (full: the product warps arrive, the gather
// warps wait; empty: the reverse), so the gather warps' loads never wait on the product's
// staging and syncs. (Run 34: one role after the other in every warp, the pass ran at 0.56-0.79
// of copy against permute_backward's 0.90-0.96; with the roles split but each piece staged by
// plain loads, the product warps' load latency bound gpt-oss's at 0.39.) Named barriers
// (bar.arrive / bar.sync) ordered the hand-over as well, but compute-sanitizer's racecheck does
// not model bar.arrive and reported every P read against its write (runs 35, 40); mbarrier
// arrive (release) and wait (acquire) it follows.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include <cutlass/arch/barrier.h>

#include "cuda/check.h"
#include "cuda/device.h"
#include "cuda/dispatch/dispatch_args.h"
#include "cuda/dispatch/rows.cuh"
#include "cuda/gemm/common/cp_async.cuh"
#include "cuda/router/checks.h"
#include "cuda/sm_count.h"
#include "moefuse/dispatch.h"

namespace moefuse {
namespace cuda {
namespace {

constexpr int kTileTokens = 32;
constexpr int kTileCols = 128;
constexpr int kTileVecs = kTileCols / 8;
constexpr int kPieceK = 64;
constexpr int kProductWarps = 4;
constexpr int kGatherWarps = 8;
constexpr int kProductThreads = kProductWarps * 32;
constexpr int kThreads = (kProductWarps + kGatherWarps) * 32;
constexpr int kBlocksPerSm = 2;
constexpr int kRowsInFlight = 4;  // rows of each of a lane's two tokens loaded at once
// Row pitches of the shared tiles, padded by 32 bytes (fp32) or 16 (bf16) so that a warp's 8-byte
// fragment loads and stores, and ldmatrix's eight row addresses, fall in distinct banks.
constexpr int kAPitch = kPieceK + 8;    // fp32 d_logits piece [kTileTokens][kPieceK]
constexpr int kBPitch = kTileCols + 8;  // bf16 w_router piece [kPieceK][kTileCols]
constexpr int kPPitch = kTileCols + 8;  // fp32 P [kTileTokens][kTileCols]
static_assert(kTileTokens == 2 * 16 && kTileCols == (kProductWarps / 2) * 8 * 8,
              "two m16 tiles, each product warp eight n8 tiles");
static_assert(kTileTokens == kGatherWarps * 4 && kTileVecs == 16,
              "a gather half-warp covers a token's chunk");
// Named barriers (0 is __syncthreads) within a role: the product warps', the gather warps'.
constexpr int kProductBarrier = 1;
constexpr int kGatherBarrier = 2;
constexpr int kGatherThreads = kGatherWarps * 32;

using cutlass::arch::ClusterBarrier;

// Two stages of the product's operands (a piece of one item each), two P buffers with their
// hand-over mbarriers, two tiles' rows. Item j of the block uses P buffer j % 2, its (j / 2)-th
// use: the product warps wait for empty[j % 2]'s phase j / 2 - 1 (the gather warps' release of
// item j - 2) before writing P, then arrive on full[j % 2] (kProductThreads arrivals complete
// phase j / 2); the gather warps wait for that phase, read P and arrive on empty[j % 2]
// (kGatherThreads arrivals). Each waiter waits on every phase of its barrier in order, one use
// of a buffer apart, so no parity wait can be lapped.
struct SharedTiles {
  uint64_t full[2];
  uint64_t empty[2];
  float a[2][kTileTokens * kAPitch];
  __nv_bfloat16 b[2][kPieceK * kBPitch];
  float p[2][kTileTokens * kPPitch];
  int rows[2][kTileTokens * kDispatchMaxTopK];  // the gather warps' usable rows, a tile each
};

struct Params {
  const uint4* dxs;
  const int32_t* row_of;
  const uint4* add;  // nullptr: none; else [T, H], dx itself or apart from it
  const float* d_logits;
  const __nv_bfloat16* w_router;
  uint4* dx;
  int tokens, top_k, rows, hidden, experts;
  int64_t items;
  int chunks;  // column chunks a token tile
  int32_t* health;
};

// Contiguous item ranges measured 0.97 / 0.93 / 0.95 the time of items b + i·G on qwen3, mixtral
// and the deepseek slice (rows of 4096, 8192, 14336 bytes), but 1.05 on gpt-oss (5760 bytes):
// session 35, calls 1-2. Our reading: every other such row starts half-way into a 256-byte unit,
// so a chunk's stores half-fill units whose other halves the same block stores an item later,
// where strided another block stores them at the same time (the permute showed the same
// sensitivity to 256-byte rows, run 13). The order is a template parameter, so that the strided
// kernel is the one before session 35 (SASS the same but for the operand order of six
// instructions): chosen at run time, the order's bookkeeping cost gpt-oss 1.8-2.9% (calls 3, 5).
inline bool contiguous_items(int64_t hidden) { return hidden * 2 % 256 == 0; }

__device__ __forceinline__ void named_sync(int id, int threads) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}

__device__ __forceinline__ uint32_t shared_address(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// The B fragments of two n8 tiles (columns c0 + 0-7 and + 8-15) for K rows k0 + 0-15, from a
// row-major [K][N] bf16 tile (pitch in elements): ldmatrix.trans of four 8 × 8 matrices gives
// lane (g, q) the pairs (k 2q, 2q + 1; n g) the K-major fragments hold; r[0], r[1] are the first
// tile's, r[2], r[3] the second's.
__device__ __forceinline__ void load_b_fragments(uint32_t (&r)[4], const __nv_bfloat16* tile,
                                                 int pitch, int k0, int c0, int lane) {
  const __nv_bfloat16* p = tile + (k0 + lane % 8 + (lane / 8 % 2) * 8) * pitch + c0 + lane / 16 * 8;
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(shared_address(p)));
}

__device__ __forceinline__ void mma_bf16(float (&d)[4], const uint32_t (&a)[4], uint32_t b0,
                                         uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
      "{%8, %9}, {%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// The block's items: first + j·stride, j < count.
struct BlockItems {
  int64_t first, stride, count;
  __device__ int64_t item(int64_t j) const { return first + j * stride; }
};

template <bool kContiguous>
__device__ __forceinline__ BlockItems block_items(const Params& p) {
  const int64_t b = blockIdx.x, n = p.items, g = gridDim.x;  // g <= n
  if constexpr (kContiguous) return {b * n / g, 1, (b + 1) * n / g - b * n / g};
  return {b, g, (n - 1 - b) / g + 1};
}

// The product warps' walk over their block's items, K piece by K piece: step s is piece
// s % pieces of the block's item s / pieces, its operands staged by cp.async into stage s % 2
// while step s - 1 computes (d_logits as fp32, rounded to bf16 as the fragments are built; zeros
// past T, E and H).
struct ProductWalk {
  BlockItems items;
  int pieces;
};

__device__ __forceinline__ void stage_step(SharedTiles& s, const Params& p, const ProductWalk& w,
                                           int64_t step, int tid) {
  const int64_t item = w.items.item(step / w.pieces);
  const int t0 = static_cast<int>(item / p.chunks) * kTileTokens;
  const int n0 = static_cast<int>(item % p.chunks) * kTileCols;
  const int k0 = static_cast<int>(step % w.pieces) * kPieceK, stage = step % 2;
  // Thread tid copies column tid % kPieceK of rows tid / kPieceK + kRowStep·u of d_logits, and
  // vector tid % kTileVecs of rows tid / kTileVecs + kBRowStep·u of w_router. Sources past an
  // edge are clamped inside the tensor and copy 0 bytes (zeros).
  constexpr int kRowStep = kProductThreads / kPieceK, kBRowStep = kProductThreads / kTileVecs;
  {
    const int r0 = tid / kPieceK, c = tid % kPieceK, e = k0 + c;
    const float* src = p.d_logits + min(e, p.experts - 1);
    float* dst = s.a[stage] + r0 * kAPitch + c;
#pragma unroll
    for (int u = 0; u < kTileTokens / kRowStep; ++u) {
      const int t = t0 + r0 + u * kRowStep;
      gemm::cp_async_4(dst + u * kRowStep * kAPitch,
                       src + static_cast<int64_t>(min(t, p.tokens - 1)) * p.experts,
                       t < p.tokens && e < p.experts ? 4 : 0);
    }
  }
  {
    const int r0 = tid / kTileVecs, col = n0 + tid % kTileVecs * 8;
    const __nv_bfloat16* src = p.w_router + min(col, p.hidden - 8);
    __nv_bfloat16* dst = s.b[stage] + r0 * kBPitch + tid % kTileVecs * 8;
#pragma unroll
    for (int u = 0; u < kPieceK / kBRowStep; ++u) {
      const int e = k0 + r0 + u * kBRowStep;
      gemm::cp_async_16(dst + u * kBRowStep * kBPitch,
                        src + static_cast<int64_t>(min(e, p.experts - 1)) * p.hidden,
                        e < p.experts && col < p.hidden ? 16 : 0);
    }
  }
  gemm::cp_async_commit();
}

__device__ __forceinline__ uint32_t bf16x2(float2 v) {
  const __nv_bfloat162 h = __floats2bfloat162_rn(v.x, v.y);  // .x in the low half
  return *reinterpret_cast<const uint32_t*>(&h);
}

template <bool kContiguous>
__device__ __forceinline__ void router_products(SharedTiles& s, const Params& p) {
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int m0 = warp % 2 * 16, nt0 = warp / 2 * 8, g = lane / 4, q = lane % 4;
  const ProductWalk w{.items = block_items<kContiguous>(p),
                      .pieces = (p.experts + kPieceK - 1) / kPieceK};
  const int64_t my_items = w.items.count;  // >= 1: blocks <= items
  const int64_t steps = my_items * w.pieces;
  float acc[8][4];
  stage_step(s, p, w, 0, tid);
  for (int64_t step = 0; step < steps; ++step) {
    const int stage = step % 2, piece = step % w.pieces;
    if (step + 1 < steps) {
      stage_step(s, p, w, step + 1, tid);  // stage step + 1's copies into the other stage
      gemm::cp_async_wait<1>();
    } else {
      gemm::cp_async_wait<0>();
    }
    named_sync(kProductBarrier, kProductThreads);  // step's operands landed, every thread's
    if (piece == 0) {
#pragma unroll
      for (int j = 0; j < 8; ++j) acc[j][0] = acc[j][1] = acc[j][2] = acc[j][3] = 0.0f;
    }
#pragma unroll
    for (int ks = 0; ks < kPieceK; ks += 16) {
      const float* x = s.a[stage] + (m0 + g) * kAPitch + ks + 2 * q;
      const uint32_t a[4] = {bf16x2(*reinterpret_cast<const float2*>(x)),
                             bf16x2(*reinterpret_cast<const float2*>(x + 8 * kAPitch)),
                             bf16x2(*reinterpret_cast<const float2*>(x + 8)),
                             bf16x2(*reinterpret_cast<const float2*>(x + 8 * kAPitch + 8))};
#pragma unroll
      for (int pair = 0; pair < 4; ++pair) {
        uint32_t b[4];  // b[0], b[1]: n8 tile nt0 + 2·pair; b[2], b[3]: the next one
        load_b_fragments(b, s.b[stage], kBPitch, ks, (nt0 + 2 * pair) * 8, lane);
        mma_bf16(acc[2 * pair], a, b[0], b[1]);
        mma_bf16(acc[2 * pair + 1], a, b[2], b[3]);
      }
    }
    named_sync(kProductBarrier, kProductThreads);  // the stage is read before it is staged again
    if (piece + 1 < w.pieces) continue;
    // The item's P into buffer j % 2, once the gather warps are done with its item j - 2.
    const int64_t j = step / w.pieces;
    const int buffer = j % 2;
    if (j >= 2) ClusterBarrier::wait(&s.empty[buffer], static_cast<uint32_t>((j / 2 - 1) % 2));
    float* out = s.p[buffer];
#pragma unroll
    for (int n = 0; n < 8; ++n) {
      const int col = (nt0 + n) * 8 + 2 * q;
      *reinterpret_cast<float2*>(out + (m0 + g) * kPPitch + col) =
          make_float2(acc[n][0], acc[n][1]);
      *reinterpret_cast<float2*>(out + (m0 + g + 8) * kPPitch + col) =
          make_float2(acc[n][2], acc[n][3]);
    }
    ClusterBarrier::arrive(&s.full[buffer]);
  }
}

// The gather warps' rows of `item` (usable_row of row_of, -1 past T) into s.rows[buffer].
__device__ __forceinline__ void stage_rows(SharedTiles& s, const Params& p, int64_t item,
                                           int buffer) {
  const int k = p.top_k, t0 = static_cast<int>(item / p.chunks) * kTileTokens;
  for (int i = threadIdx.x - kProductThreads; i < kTileTokens * k; i += kGatherThreads) {
    const int t = t0 + i / k;
    s.rows[buffer][i] =
        t < p.tokens ? usable_row(p.row_of[static_cast<int64_t>(t0) * k + i], p.rows, p.health)
                     : -1;
  }
}

// Rows [j0, j0 + kRowsInFlight) of the lane's two tokens (zeros past k and for unused rows).
__device__ __forceinline__ void load_rows(uint4 (&v)[2][kRowsInFlight], const Params& p,
                                          const int* rows, const int (&tl)[2],
                                          const bool (&live)[2], int c, int j0) {
  const int k = p.top_k, vecs = p.hidden / 8;
#pragma unroll
  for (int i = 0; i < 2; ++i) {
#pragma unroll
    for (int u = 0; u < kRowsInFlight; ++u) {
      const int j = j0 + u;
      const int row = live[i] && j < k ? rows[tl[i] * k + j] : -1;
      v[i][u] = row >= 0 ? __ldcs(p.dxs + static_cast<int64_t>(row) * vecs + c)
                         : make_uint4(0, 0, 0, 0);
    }
  }
}

__device__ __forceinline__ void accumulate_rows(float (&acc)[2][8],
                                                const uint4 (&v)[2][kRowsInFlight]) {
#pragma unroll
  for (int i = 0; i < 2; ++i) {
#pragma unroll
    for (int u = 0; u < kRowsInFlight; ++u) {
      float f[8];
      unpack_bf16x8(v[i][u], f);
#pragma unroll
      for (int e = 0; e < 8; ++e) acc[i][e] += f[e];
    }
  }
}

// The gather warps' item: dx of `item`, the block's j-th, adding P from buffer j % 2 last (its
// full barrier's phase parity (j / 2) % 2: SharedTiles). Its token tile's
// rows are in shared memory (s.rows[rows_buffer]), staged by the block's first item of the tile
// (`new_tile`; a gather thread may still read the previous tile's rows while another stages
// these, hence two buffers), so that every load of dxs is issued at once instead of each behind
// its own row_of load, and once a tile, not once an item. (Staging the next item's rows while
// this item's loads were in flight measured no faster, and gpt-oss 1.15x slower: run 34, call
// 5.)
__device__ __forceinline__ void gather_sum(SharedTiles& s, const Params& p, int64_t item,
                                           int64_t j, int rows_buffer, bool new_tile) {
  const int buffer = j % 2;
  const int warp = threadIdx.x / 32 - kProductWarps, lane = threadIdx.x % 32;
  const int t0 = static_cast<int>(item / p.chunks) * kTileTokens;
  const int n0 = static_cast<int>(item % p.chunks) * kTileCols;
  const int k = p.top_k, vecs = p.hidden / 8, c = n0 / 8 + lane % 16;
  int tl[2];
  bool live[2];
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    tl[i] = warp * 4 + lane / 16 + 2 * i;
    live[i] = t0 + tl[i] < p.tokens && c < vecs;
  }
  if (new_tile) {
    stage_rows(s, p, item, rows_buffer);
    named_sync(kGatherBarrier, kGatherThreads);
  }
  float acc[2][8] = {};
  for (int j0 = 0; j0 < k; j0 += kRowsInFlight) {
    uint4 v[2][kRowsInFlight];
    load_rows(v, p, s.rows[rows_buffer], tl, live, c, j0);
    accumulate_rows(acc, v);
  }
  if (p.add) {
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      if (!live[i]) continue;
      float a[8];
      unpack_bf16x8(__ldcs(p.add + static_cast<int64_t>(t0 + tl[i]) * vecs + c), a);
#pragma unroll
      for (int e = 0; e < 8; ++e) acc[i][e] += a[e];
    }
  }
  ClusterBarrier::wait(&s.full[buffer], static_cast<uint32_t>((j / 2) % 2));
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const float4* prod =
        reinterpret_cast<const float4*>(s.p[buffer] + tl[i] * kPPitch + lane % 16 * 8);
    const float4 lo = prod[0], hi = prod[1];
    acc[i][0] += lo.x, acc[i][1] += lo.y, acc[i][2] += lo.z, acc[i][3] += lo.w;
    acc[i][4] += hi.x, acc[i][5] += hi.y, acc[i][6] += hi.z, acc[i][7] += hi.w;
  }
  ClusterBarrier::arrive(&s.empty[buffer]);
#pragma unroll
  for (int i = 0; i < 2; ++i)
    if (live[i]) p.dx[static_cast<int64_t>(t0 + tl[i]) * vecs + c] = pack_bf16x8(acc[i]);
}

template <bool kContiguous>
__global__ void __launch_bounds__(kThreads, kBlocksPerSm)
    permute_backward_router_kernel(Params p) {
  extern __shared__ __align__(16) unsigned char smem[];
  SharedTiles& tiles = *reinterpret_cast<SharedTiles*>(smem);
  if (threadIdx.x == 0) {
    for (int b = 0; b < 2; ++b) {
      ClusterBarrier::init(&tiles.full[b], kProductThreads);
      ClusterBarrier::init(&tiles.empty[b], kGatherThreads);
    }
  }
  __syncthreads();  // the barriers exist before either role touches them
  if (threadIdx.x < kProductThreads) return router_products<kContiguous>(tiles, p);
  if constexpr (kContiguous) {
    const BlockItems items = block_items<true>(p);
    int64_t tile = -1;
    int tiles_seen = 0;
    for (int64_t j = 0; j < items.count; ++j) {
      const int64_t item = items.item(j);
      const bool new_tile = item / p.chunks != tile;
      if (new_tile) tile = item / p.chunks, ++tiles_seen;
      gather_sum(tiles, p, item, j, tiles_seen % 2, new_tile);
    }
  } else {  // block_items<false>'s items, each one's rows staged in the item's buffer
    int j = 0;
    for (int64_t item = blockIdx.x; item < p.items; item += gridDim.x, ++j)
      gather_sum(tiles, p, item, j, j % 2, true);
  }
}

template <bool kContiguous>
void launch(const Params& p, cudaStream_t stream) {
  const int64_t max_blocks = int64_t{device_sm_count()} * kBlocksPerSm;
  const unsigned blocks = static_cast<unsigned>(std::min(p.items, max_blocks));
  constexpr size_t smem = sizeof(SharedTiles);
  MOEFUSE_CUDA_CHECK(cudaFuncSetAttribute(permute_backward_router_kernel<kContiguous>,
                                          cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  permute_backward_router_kernel<kContiguous><<<blocks, kThreads, smem, stream>>>(p);
  MOEFUSE_CUDA_CHECK_LAUNCH();
}

}  // namespace
}  // namespace cuda

void permute_backward_router(const TensorView& dxs, const TensorView& row_of,
                             const TensorView& add, const TensorView& d_logits,
                             const TensorView& w_router, const TensorView& dx,
                             const TensorView& health, cudaStream_t stream) {
  const cuda::RowsShape s = cuda::check_permute_backward(dxs, row_of, dx);
  if (!is_absent(add)) cuda::check_added_term(add, s, dx, "dx");
  const int64_t E = cuda::check_router_dx_term(d_logits, w_router, s);
  int32_t* flag = cuda::expect_health(health);
  cuda::expect_launchable(stream);
  if (s.tokens == 0) return;
  const int chunks = static_cast<int>((s.hidden + cuda::kTileCols - 1) / cuda::kTileCols);
  const int64_t items = (s.tokens + cuda::kTileTokens - 1) / cuda::kTileTokens * chunks;
  const cuda::Params p{
      .dxs = dxs.as<const uint4>(),
      .row_of = row_of.as<const int32_t>(),
      .add = is_absent(add) ? nullptr : add.as<const uint4>(),
      .d_logits = d_logits.as<const float>(),
      .w_router = w_router.as<const __nv_bfloat16>(),
      .dx = dx.as<uint4>(),
      .tokens = static_cast<int>(s.tokens),
      .top_k = static_cast<int>(s.top_k),
      .rows = static_cast<int>(s.rows),
      .hidden = static_cast<int>(s.hidden),
      .experts = static_cast<int>(E),
      .items = items,
      .chunks = chunks,
      .health = flag,
  };
  if (cuda::contiguous_items(s.hidden)) cuda::launch<true>(p, stream);
  else cuda::launch<false>(p, stream);
}

}  // namespace moefuse
