// The k-grouped wgrad kernel: D[e] (+)= A_eᵀ · B_e, where A_e and B_e are the rows
// [offsets[e], offsets[e+1]) of A [m_cap, m_out] and B [m_cap, n_out]: the reduction length is
// expert e's row count, read on the device. Both operands are MN-major (rows are K).
// Persistent, warp-specialised, 384 threads.
//
// Tiles: (expert, m-block, n-block) over the fixed [m_out, n_out] output of every expert, experts
// in turn (longest first, walked in snake rounds, where the load is skewed: wgrad_order.h; a
// tile's cost follows its expert's rows), m-blocks in groups of 8 inside an expert, as the
// forward's scheduler; the count is known on the host, no scan. An expert with no rows runs
// no K block: its tile writes zeros, or nothing with accumulate.
//
// Ragged K: K block kb of expert e reads rows offsets[e] + 64·kb .. + 63 (TMA takes any row
// coordinate; rows past m_cap read zeros). The last block may hold rows of the next expert (or a
// caller's unused capacity, possibly NaN): the consumers run only the wgmma K steps (16 rows
// each) that hold the expert's rows, and zero the rows of the last of them past the expert's end
// in both operands' stage before the wgmmas read it (an MN-major K row is one contiguous
// 128-byte line of each 8 KiB chunk): generic-proxy stores, fence.proxy.async, then a named
// barrier of the 256 consumer threads (the B stage is shared by both warpgroups).
//
// Gather variant (kGather): B's rows come from x [gather_rows, n_out] through gather_index by
// 16-byte cp.async issued by the 128 producer threads into the layout TMA would produce (chunk c
// of K row r of MN chunk i at i·8 KiB + r·128 + (c ^ r%8)·16); rows past the expert or with an
// index outside [0, gather_rows) are zero-filled (src-size 0). full[s] then counts 1 (thread 0's
// arrive.expect_tx for A's TMA) + 128 (cp.async.mbarrier.arrive.noinc).
//
// Epilogue: the TMA variant hands each finished tile to warps 1-3 of warpgroup 0
// (tile_handoff.cuh: fp32 D in two halves, bf16 D in one; the narrow 128 × 192 fp32 tile, where
// config.h wgrad_narrow chooses it, in one) and its consumers go on with the next tile; the
// epilogue warps store it, or add it to the old D with accumulate. The gather variant,
// whose producer needs all of warpgroup 0, stores from the consumers by asynchronous TMA stores
// of sub-tiles (slab_tma_store.cuh), which leave room for a fourth stage (config.h). Both skip
// an empty expert's tile in accumulate mode.
#pragma once

#include <cuda.h>

#include <cutlass/arch/reg_reconfig.h>

#include "cuda/gemm/backward/mainloop.cuh"
#include "cuda/gemm/backward/params.h"
#include "cuda/gemm/backward/slab_tma_store.cuh"
#include "cuda/gemm/backward/tile_handoff.cuh"
#include "cuda/gemm/backward/wgrad_order.h"
#include "cuda/gemm/common/cluster.cuh"
#include "cuda/gemm/common/cp_async.cuh"
#include "cuda/gemm/tile_scheduler.h"
#include "moefuse/grouped_gemm.h"

namespace moefuse::gemm::bwd {

// Expert e's rows, capped at m_cap (bad offsets never make a tile read or write out of bounds).
struct ExpertRows {
  int first;
  int count;  // >= 0
};
__device__ __forceinline__ ExpertRows expert_rows(const WgradProblem& p, int e) {
  const int first = __ldg(p.offsets + e);
  return ExpertRows{.first = first, .count = max(0, min(__ldg(p.offsets + e + 1), p.m_cap) - first)};
}

// The TMA wgrad's ring G (config.h): WgradStages (128 × 256 tiles; fp32 D in two hand-offs) or,
// where wgrad_narrow (fp32 D), WgradNarrowStages (128 × 192, the whole tile in one hand-off).
template <class G>
inline constexpr bool kNarrowWgrad = G::kN == kNarrowBlockN;
using GatherWgradLayout = StagedLayout<GatherWgradStages>;

// Every expert's tiles over the same [m_out, n_out] output, experts one after another in the
// order kept in shared memory (wgrad_order.h: longest first where the load is skewed, walked in
// snake rounds, else index order round by round), or, for the gather variant, which has no room
// for the order (kOrdered false), in index order.
template <bool kOrdered>
struct WgradTiles {
  TileShape shape;
  int m_blocks;
  int per_expert;
  int total;         // num_experts · per_expert
  const int* order;  // [E] shared memory (kOrdered)
  bool snake;        // walk in snake rounds (the order is longest first)
  __device__ TileCoord coord(int t) const {
    TileCoord c = expert_tile_coord(t % per_expert, m_blocks, shape);
    c.expert = kOrdered ? order[t / per_expert] : t / per_expert;
    return c;
  }
  // This CTA's tile in walk round `round` + 1 (start at -1), advancing `round`: false past its
  // last. A round's tile lies past the end only in the last round, so that ends the walk too.
  // Every role of the CTA walks the same sequence. kWarp: whole warps call it, and take the
  // expert (read from shared memory) through a warp reduction, so that ptxas knows it uniform and
  // keeps the K loop's descriptor arithmetic in uniform registers: without it the 128 × 192
  // consumers' K loop grew from 413 to 440 instructions (R2UR 20 → 40) (run 43, call 2).
  template <bool kWarp>
  __device__ bool next(int& round, TileCoord& c) const {
    const int ctas = gridDim.x, cta = blockIdx.x;
    ++round;
    const int t = snake ? snake_tile(round, cta, ctas) : round * ctas + cta;
    if (t >= total) return false;
    c = coord(t);
    if constexpr (kWarp && kOrdered) c.expert = warp_uniform(c.expert);
    return true;
  }
};

// TMA producer (one thread): 2 boxes of A (128 m) and G::kN / 64 of B per K block.
template <class G>
__device__ __forceinline__ void wgrad_produce_tma(const CUtensorMap* tmap_a,
                                                  const CUtensorMap* tmap_b,
                                                  const WgradProblem& p,
                                                  const StagedLayout<G>& smem,
                                                  const WgradTiles<true>& tiles) {
  PipelineState<G::kStages> pipe;
  TileCoord c;
  for (int round = -1; tiles.next<false>(round, c);) {
    const ExpertRows rows = expert_rows(p, c.expert);
    const int k_blocks = ceil_div(rows.count, G::kBlockK);
    for (int kb = 0; kb < k_blocks; ++kb) {
      ClusterBarrier::wait(&smem.empty[pipe.stage], pipe.phase ^ 1u);
      uint64_t* full = &smem.full[pipe.stage];
      ClusterTransactionBarrier::arrive_and_expect_tx(full, G::kABytes + G::kBBytes);
      const int k0 = rows.first + kb * G::kBlockK;
      tma_mn_major_2d<G>(tmap_a, full, smem.a_stage(pipe.stage), kBlockM / kMnChunk,
                         c.m_block * kBlockM, k0);
      tma_mn_major_2d<G>(tmap_b, full, smem.b_stage(pipe.stage), G::kN / kMnChunk,
                         c.n_block * G::kN, k0);
      pipe.advance();
    }
  }
}

// Gather producer (the 128 threads of warpgroup 0): thread i copies 16-byte chunk i % 8 of K rows
// i / 8 + 16·j (j < 4) in each of the 4 MN chunks of B; thread 0 also issues A's TMA.
__device__ __forceinline__ void wgrad_produce_gather(const CUtensorMap* tmap_a,
                                                     const WgradProblem& p,
                                                     const GatherWgradLayout& smem,
                                                     const WgradTiles<false>& tiles) {
  using G = GatherWgradStages;
  static_assert(G::kBlockK == 64, "the passes below are written for 64-row K blocks");
  constexpr int kPieces = kMnChunk * 2 / 16;                 // 8 per 128-byte K row
  constexpr int kRowsPerPass = kWarpgroupThreads / kPieces;  // 16
  constexpr int kPasses = G::kBlockK / kRowsPerPass;         // 4
  constexpr int kChunks = kBlockN / kMnChunk;                // 4
  const int tid = threadIdx.x;
  const int piece = tid % kPieces;
  const int row_in_pass = tid / kPieces;
  PipelineState<G::kStages> pipe;
  TileCoord c;
  for (int round = -1; tiles.next<true>(round, c);) {
    const ExpertRows rows = expert_rows(p, c.expert);
    const int k_blocks = ceil_div(rows.count, G::kBlockK);
    const int n0 = c.n_block * kBlockN + piece * 8;
    for (int kb = 0; kb < k_blocks; ++kb) {
      // Source tokens of this thread's K rows (-1: zeros), read before waiting for the stage.
      int token[kPasses];
#pragma unroll
      for (int j = 0; j < kPasses; ++j) {
        const int r = kb * G::kBlockK + row_in_pass + kRowsPerPass * j;
        const int tok = r < rows.count ? __ldg(p.gather_index + rows.first + r) : -1;
        token[j] = (tok >= 0 && tok < p.gather_rows) ? tok : -1;
      }
      ClusterBarrier::wait(&smem.empty[pipe.stage], pipe.phase ^ 1u);
      uint64_t* full = &smem.full[pipe.stage];
      if (tid == 0) {
        ClusterTransactionBarrier::arrive_and_expect_tx(full, G::kABytes);
        tma_mn_major_2d<G>(tmap_a, full, smem.a_stage(pipe.stage), kBlockM / kMnChunk,
                           c.m_block * kBlockM, rows.first + kb * G::kBlockK);
      }
      uint8_t* b_stage = smem.b_stage(pipe.stage);
#pragma unroll
      for (int i = 0; i < kChunks; ++i) {
        const int col = n0 + i * kMnChunk;
#pragma unroll
        for (int j = 0; j < kPasses; ++j) {
          const int r = row_in_pass + kRowsPerPass * j;
          const bool ok = token[j] >= 0 && col < p.n_out;
          const __nv_bfloat16* src =
              ok ? p.gather_x + static_cast<int64_t>(token[j]) * p.n_out + col : p.gather_x;
          cp_async_16(b_stage + i * G::kMnChunkBytes + r * 128 + ((piece ^ (r % 8)) * 16), src,
                      ok ? 16 : 0);
        }
      }
      cutlass::arch::cpasync_barrier_arrive_noinc(full);
      pipe.advance();
    }
  }
  // Do not leave the kernel with copies in flight.
  asm volatile("cp.async.wait_all;\n" ::: "memory");
}

// The last K block of a tile: its valid rows (the expert's last, 1 to 64) and the wgmma K steps
// that cover them; the steps past them are not run (consume_tile), so only the rows between the
// valid ones and the end of the last step run need zeros (at most 15, not up to 63).
struct LastKBlock {
  int valid;
  int steps;
  __device__ static LastKBlock of(int rows, int k_blocks, int block_k) {
    const int valid = rows - (k_blocks - 1) * block_k;
    return LastKBlock{.valid = valid, .steps = ceil_div(valid, kWgmmaK)};
  }
};

// Zeroes K rows [valid, end) of every MN chunk of the stage (2 of A, G::kN / 64 of B): 16-byte
// stores by the 256 consumer threads, then the proxy fence and the consumers' named barrier.
template <class G>
__device__ __forceinline__ void zero_tail_rows(const StagedLayout<G>& smem, int stage, int valid,
                                               int end) {
  constexpr int kChunksA = kBlockM / kMnChunk, kChunks = kChunksA + G::kN / kMnChunk;
  const int per_chunk = (end - valid) * (128 / 16);
  const int ctid = threadIdx.x - kWarpgroupThreads;
  for (int i = ctid; i < kChunks * per_chunk; i += kConsumerThreads) {
    const int chunk = i / per_chunk;
    uint8_t* base = chunk < kChunksA
                        ? smem.a_stage(stage) + chunk * G::kMnChunkBytes
                        : smem.b_stage(stage) + (chunk - kChunksA) * G::kMnChunkBytes;
    *reinterpret_cast<uint4*>(base + valid * 128 + (i % per_chunk) * 16) = make_uint4(0, 0, 0, 0);
  }
  cutlass::arch::fence_view_async_shared();
  asm volatile("bar.sync %0, %1;\n" ::"r"(kConsumerBarrierId), "r"(kConsumerThreads) : "memory");
}

// An empty expert's tile leaves D untouched in accumulate mode (and zeros it otherwise).
__device__ __forceinline__ bool skip_tile(const WgradProblem& p, int k_blocks) {
  return k_blocks == 0 && p.accumulate;
}

// Gather variant, in the consumers: their slab of tile c into D[e] by D's element type and mode.
__device__ __forceinline__ void wgrad_store(const float (&acc)[128], const WgradProblem& p,
                                            const CUtensorMap* map, uint8_t* buffers, int slab,
                                            const TileCoord& c) {
  const int row0 = c.m_block * kBlockM + slab * (kBlockM / kConsumerWarpgroups);
  const int col0 = c.n_block * kBlockN;
  if (!p.d_fp32) {
    store_slab_tma<__nv_bfloat16, false>(acc, buffers, map, slab, c.expert, row0, col0);
  } else if (p.accumulate) {
    store_slab_tma<float, true>(acc, buffers, map, slab, c.expert, row0, col0);
  } else {
    store_slab_tma<float, false>(acc, buffers, map, slab, c.expert, row0, col0);
  }
}

// D[e]'s tile at (m-block, n-block) of tile c (tiles block_n wide): its first row and column.
__device__ __forceinline__ uint8_t* wgrad_tile_origin(const WgradProblem& p, const TileCoord& c,
                                                      int block_n) {
  const int elt = p.d_fp32 ? 4 : 2;
  return static_cast<uint8_t*>(p.d) +
         ((static_cast<int64_t>(c.expert) * p.m_out + c.m_block * kBlockM) * p.n_out +
          c.n_block * block_n) * elt;
}

// A narrow fp32 tile (kNarrowWgrad), staged whole, out to D by bulk copies or bulk reduce-adds,
// a row each: `rows` and `cols` of it are D's.
template <bool kAdd>
__device__ __forceinline__ void drain_narrow(const uint8_t* tile, uint8_t* d, int n_out, int rows,
                                             int cols) {
  copy_rows_bulk<kAdd>(tile, kNarrowPitch, d, int64_t{n_out} * 4, min(kBlockM, rows),
                       min(kNarrowBlockN, cols) * 4);
}

// TMA variant, warps 1-3 of warpgroup 0: every tile of this CTA, in the consumers' order.
template <class G>
__device__ __forceinline__ void wgrad_epilogue_warps(const WgradProblem& p,
                                                     const StagedLayout<G>& smem,
                                                     const WgradTiles<true>& tiles) {
  TileHandoff h = TileHandoff::of(smem);
  TileCoord c;
  for (int round = -1; tiles.next<true>(round, c);) {
    if (skip_tile(p, ceil_div(expert_rows(p, c.expert).count, G::kBlockK))) continue;
    uint8_t* d = wgrad_tile_origin(p, c, G::kN);
    const int rows = p.m_out - c.m_block * kBlockM, cols = p.n_out - c.n_block * G::kN;
    if constexpr (kNarrowWgrad<G>) {
      receive_tile(h, 1, [&](int, const uint8_t* tile) {
        if (p.accumulate) drain_narrow<true>(tile, d, p.n_out, rows, cols);
        else drain_narrow<false>(tile, d, p.n_out, rows, cols);
      });
      continue;
    }
    const int parts = handoff_parts(p.d_fp32);
    receive_tile(h, parts, [&](int part, const uint8_t* tile) {
      if (p.accumulate)
        drain_output<true>(tile, part, parts, d, p.d_fp32, p.n_out, cols, 0, rows, 0);
      else
        drain_output<false>(tile, part, parts, d, p.d_fp32, p.n_out, cols, 0, rows, 0);
    });
  }
}

// G: the stage ring and tile width (config.h): GatherWgradStages with kGather, else
// WgradStages or WgradNarrowStages (the launcher chooses by wgrad_narrow).
template <bool kGather, class G>
__global__ void __launch_bounds__(kThreads, 1)
    wgrad_kernel(const __grid_constant__ CUtensorMap tmap_a,
                 const __grid_constant__ CUtensorMap tmap_b,
                 const __grid_constant__ CUtensorMap tmap_d, const WgradProblem p) {
  extern __shared__ uint8_t smem_raw[];
  const StagedLayout<G> smem = StagedLayout<G>::carve(smem_raw);
  const int n_blocks = ceil_div(p.n_out, G::kN), m_blocks = ceil_div(p.m_out, kBlockM);
  // The TMA variants keep the expert order (wgrad_order.h) in the layout's tile_start slot; the
  // gather variant's four stages leave no room for E ints at E = 1024, so it keeps index order.
  if (threadIdx.x == 0) smem.init_barriers(kGather ? 1 + kWarpgroupThreads : 1);
  bool snake = false;
  if constexpr (!kGather) {
    const int all_rows =
        max(0, min(__ldg(p.offsets + p.num_experts), p.m_cap) - __ldg(p.offsets));
    snake = order_experts<kThreads, kGroupedGemmMaxExperts>(
        smem.tile_start, p.num_experts, all_rows, [&](int e) { return expert_rows(p, e).count; });
  }
  __syncthreads();
  const WgradTiles<!kGather> tiles{.shape = {.block_m = kBlockM, .block_n = G::kN,
                                              .group_m = kGroupM, .n_blocks = n_blocks},
                                    .m_blocks = m_blocks,
                                    .per_expert = m_blocks * n_blocks,
                                    .total = p.num_experts * m_blocks * n_blocks,
                                    .order = smem.tile_start,
                                    .snake = snake};
  const int warpgroup = threadIdx.x / kWarpgroupThreads;

  if (warpgroup == 0) {
    cutlass::arch::warpgroup_reg_dealloc<kGather ? kGatherProducerRegs : kProducerRegs>();
    if constexpr (kGather) wgrad_produce_gather(&tmap_a, p, smem, tiles);
    else if (threadIdx.x == 0) wgrad_produce_tma<G>(&tmap_a, &tmap_b, p, smem, tiles);
    else if (threadIdx.x >= 32) wgrad_epilogue_warps<G>(p, smem, tiles);
    return;
  }

  cutlass::arch::warpgroup_reg_alloc<kGather ? kGatherConsumerRegs : kConsumerRegs>();
  const int slab = warpgroup - 1;
  TileHandoff handoff = TileHandoff::of(smem);
  uint8_t* buffers = smem.tile + slab * 2 * kSlabSubTileBytes;  // the gather variant's
  float acc[G::kN / 2];
  PipelineState<G::kStages> pipe;
  TileCoord c;
  for (int round = -1; tiles.template next<true>(round, c);) {
    const ExpertRows rows = expert_rows(p, c.expert);
    const int k_blocks = ceil_div(rows.count, G::kBlockK);
    const LastKBlock last = LastKBlock::of(rows.count, k_blocks, G::kBlockK);
    consume_tile<Major::MN, Major::MN, G>(
        acc, k_blocks, smem, pipe, slab,
        [&](int stage, int kb) {
          // cp.async wrote B through the generic proxy; wgmma reads through the async proxy.
          if constexpr (kGather) cutlass::arch::fence_view_async_shared();
          if (kb == k_blocks - 1 && last.valid < last.steps * kWgmmaK)
            zero_tail_rows<G>(smem, stage, last.valid, last.steps * kWgmmaK);
        },
        last.steps);
    if (skip_tile(p, k_blocks)) continue;
    if constexpr (kGather) {
      wgrad_store(acc, p, &tmap_d, buffers, slab, c);
    } else if constexpr (kNarrowWgrad<G>) {  // fp32, whole, drained by bulk copies
      send_part<float, 0, kNarrowPitch, true, kNarrowRowBytes>(acc, handoff, slab);
    } else {
      hand_off_tile(acc, handoff, slab, p.d_fp32, p.accumulate);
    }
  }
  if constexpr (kGather) wait_slab_stores();
}

}  // namespace moefuse::gemm::bwd
