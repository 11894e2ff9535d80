// The FP8 k-grouped wgrad kernel: D[e] (+)= at_e · bt_eᵀ, where at_e / bt_e are expert e's
// column groups of the column-wise operands (moefuse/grouped_gemm_fp8_wgrad.h). Persistent,
// warp-specialised, 384 threads.
//
// Tiles: (expert, m-block over N_a, n-block over N_b), experts in turn (longest first, walked in
// snake rounds, where the load is skewed: bwd/wgrad_order.h), m-blocks in groups of 8
// (bwd::WgradTiles: the count is known on the host). The reduction of expert e runs over its
// groups group_start[e] .. group_start[e+1] - 1, which warp 0 computes from the offsets at kernel
// start (colwise_groups.h: the quantiser's own scan). Every K block is one whole scale group of
// one expert (the quantiser zero-pads each expert's last group), so no K masking is needed.
//
// Pipeline protocol (kStages stages, full / empty mbarriers, as the forward FP8 kernel):
//   producer (warp 0, lane 0 issuing): wait empty[s] (parity phase ^ 1), arrive.expect_tx(full[s],
//     kStageBytes), four TMA loads: at [128 rows of the m-block × 128 columns of group G], bt
//     [128 rows of the n-block × the same columns], a_scales[G, m-block's 128], b_scales[G,
//     n-block's 128] (rows / columns past N_a, N_b read zeros).
//   consumers (256 threads): wait full[s] (parity phase); read their 2 row scales from the
//     stage; 4 wgmma m64n128k32 into a fresh block accumulator; wait_group 0; promote
//     acc += block · (a_scale[row] · b_scale[col]) reading the 32 column scales from the stage —
//     a per-element scale product, unlike the forward's per-row × per-block; then arrive
//     empty[s] (count 256). The two consumer warpgroups interleave, so one's promotion overlaps
//     the other's wgmmas.
//   hand-off (common/tile_handoff.cuh): the finished tile goes as fp32 (bf16 d: rounded to bf16)
//     into the tile buffer in one part; warps 1-3 drain it by bulk copies, one a row
//     (bwd::drain_output; with accumulate, bulk reduce-adds), or where the experts are short
//     (p.tensor_store, wgrad_config.h) by four TMA tensor stores of 128B-swizzled column chunks,
//     while the consumers run the next tile. An empty expert's tile hands over zeros, or with
//     accumulate nothing at all (both sides skip it by the same rule).
#pragma once

#include <cuda.h>

#include <cutlass/arch/reg_reconfig.h>

#include <utility>

#include "cuda/gemm/backward/tile_handoff.cuh"
#include "cuda/gemm/backward/wgrad_kernel.cuh"
#include "cuda/gemm/common/cluster.cuh"
#include "cuda/gemm/common/handoff_layout.cuh"
#include "cuda/gemm/common/tma_issue.cuh"
#include "cuda/gemm/device_scheduler.cuh"
#include "cuda/gemm/fp8/colwise_groups.h"
#include "cuda/gemm/fp8/mainloop.cuh"
#include "cuda/gemm/fp8/wgrad_config.h"

namespace moefuse::gemm::fp8_wgrad {

struct Fp8WgradProblem {
  const int* offsets = nullptr;  // [num_experts + 1], device
  int num_experts = 0;
  int n_a = 0;     // rows of D[e]
  int n_b = 0;     // columns of D[e]
  int groups = 0;  // capacity G of the operands ([N, 128 G])
  void* d = nullptr;  // [num_experts, n_a, n_b], fp32 or (without accumulate) bf16
  bool fp32 = true;
  bool accumulate = false;
  bool tensor_store = false;  // the tile leaves by TMA tensor stores (wgrad_config.h says when)
};

// group_start [E + 1] lives in the layout's tile_start slot, the expert order [E] behind it.
using SharedLayout = HandoffSharedLayout<kStages, kABytes, kBSlotBytes, bwd::kTileBufferBytes>;
__device__ __forceinline__ int* expert_order(const SharedLayout& s, int num_experts) {
  return s.tile_start + num_experts + 1;
}

__device__ __forceinline__ float* a_scale_stage(const SharedLayout& s, int stage) {
  return reinterpret_cast<float*>(s.b_stage(stage) + kBBytes);
}
__device__ __forceinline__ float* b_scale_stage(const SharedLayout& s, int stage) {
  return a_scale_stage(s, stage) + kBlockM;
}

struct ExpertGroups {
  int first;
  int count;
};
__device__ __forceinline__ ExpertGroups expert_groups(const SharedLayout& s, int e) {
  return ExpertGroups{.first = s.tile_start[e], .count = s.tile_start[e + 1] - s.tile_start[e]};
}

// An empty expert's tile leaves D untouched in accumulate mode (and zeros it otherwise).
__device__ __forceinline__ bool skip_tile(const Fp8WgradProblem& p, int groups) {
  return groups == 0 && p.accumulate;
}

// Warp 0 produces, lane 0 issuing: the FP8 forward kernel's producer (fp8/mainloop.cuh, produce,
// says why a convergent warp with predicated copies, not one thread).
__device__ __forceinline__ void produce(const CUtensorMap* tmap_a, const CUtensorMap* tmap_b,
                                        const CUtensorMap* tmap_sa, const CUtensorMap* tmap_sb,
                                        const SharedLayout& smem,
                                        const bwd::WgradTiles<true>& tiles) {
  const bool issues = threadIdx.x % 32 == 0;
  PipelineState<kStages> pipe;
  TileCoord c;
  for (int round = -1; tiles.next<true>(round, c);) {
    const ExpertGroups eg{.first = warp_uniform(expert_groups(smem, c.expert).first),
                          .count = warp_uniform(expert_groups(smem, c.expert).count)};
    for (int kb = 0; kb < eg.count; ++kb) {
      wait_barrier(shared_address(&smem.empty[pipe.stage]), pipe.phase ^ 1u);
      const uint32_t full = shared_address(&smem.full[pipe.stage]);
      arrive_expect_tx_if(issues, full, kStageBytes);
      const int g = eg.first + kb;
      tma_load_2d_if(issues, tmap_a, full, shared_address(smem.a_stage(pipe.stage)),
                     g * kBlockK, c.m_block * kBlockM);
      tma_load_2d_if(issues, tmap_b, full, shared_address(smem.b_stage(pipe.stage)),
                     g * kBlockK, c.n_block * kBlockN);
      tma_load_2d_if(issues, tmap_sa, full, shared_address(a_scale_stage(smem, pipe.stage)),
                     c.m_block * kBlockM, g);
      tma_load_2d_if(issues, tmap_sb, full, shared_address(b_scale_stage(smem, pipe.stage)),
                     c.n_block * kBlockN, g);
      pipe.advance();
    }
  }
}

// One tile's reduction for consumer warpgroup `slab` (rows 64·slab .. 64·slab + 63 of the tile).
// Accumulator layout (m64n128 f32): acc[4j + 2h + i] is row 16·warp + lane/4 + 8h of the slab,
// column 8j + 2·(lane % 4) + i of the tile: h picks the row scale, (j, i) the column scale.
__device__ __forceinline__ void consume_tile(float (&acc)[kAccumulators], int groups,
                                             const SharedLayout& smem,
                                             PipelineState<kStages>& pipe, int slab) {
  using cute::SM90::GMMA::ScaleOut;
#pragma unroll
  for (int i = 0; i < kAccumulators; ++i) acc[i] = 0.0f;
  float block[kAccumulators];
  const int lane = threadIdx.x % 32, warp = (threadIdx.x / 32) % 4;
  const int row = slab * (kBlockM / 2) + 16 * warp + lane / 4, col = 2 * (lane % 4);
  for (int kb = 0; kb < groups; ++kb) {
    ClusterBarrier::wait(&smem.full[pipe.stage], pipe.phase);
    // The scales by LDS from 32-bit addresses: through a pointer into the stage they compiled to
    // generic loads (LD.E, on the long scoreboard), which the promotion's FMULs waited for (run
    // 45: the wgrad 0.96-0.99x the time with LDS).
    const uint32_t sa = shared_address(a_scale_stage(smem, pipe.stage)) + 4 * row;
    const uint32_t sb = shared_address(b_scale_stage(smem, pipe.stage)) + 4 * col;
    const float a0 = ld_shared_f32(sa), a1 = ld_shared_f32(sa + 8 * 4);
    const uint64_t desc_a = smem_descriptor(smem.a_stage(pipe.stage) + slab * (kBlockM / 2) * 128);
    const uint64_t desc_b = smem_descriptor(smem.b_stage(pipe.stage));
    fence_accumulators(block);
    cute::warpgroup_arrive();
#pragma unroll
    for (int k = 0; k < kBlockK / fp8::kWgmmaK; ++k) {
      // +32 bytes of K per step = +2 in the descriptor's address field (smem_descriptor).
      fp8::wgmma_m64k32<kBlockN>(desc_a + 2 * k, desc_b + 2 * k, block,
                                 k == 0 ? ScaleOut::Zero : ScaleOut::One,
                                 std::make_index_sequence<kAccumulators>{});
    }
    cute::warpgroup_commit_batch();
    cute::warpgroup_wait<0>();
    fence_accumulators(block);
    // The column scales are read from the stage during the promotion (holding all 32 across the
    // wgmmas spills at the consumers' 184 registers), so the stage is released after it.
#pragma unroll
    for (int j = 0; j < kBlockN / 8; ++j) {
      const float2 b = ld_shared_f32x2(sb + 8 * 4 * j);
      acc[4 * j + 0] = fmaf(a0 * b.x, block[4 * j + 0], acc[4 * j + 0]);
      acc[4 * j + 1] = fmaf(a0 * b.y, block[4 * j + 1], acc[4 * j + 1]);
      acc[4 * j + 2] = fmaf(a1 * b.x, block[4 * j + 2], acc[4 * j + 2]);
      acc[4 * j + 3] = fmaf(a1 * b.y, block[4 * j + 3], acc[4 * j + 3]);
    }
    ClusterBarrier::arrive(&smem.empty[pipe.stage]);
    pipe.advance();
  }
}

// D[e]'s tile c: its first element, and how many of its rows and columns exist.
struct OutputTile {
  uint8_t* origin;
  int rows;
  int cols;
  __device__ static OutputTile of(const Fp8WgradProblem& p, const TileCoord& c) {
    const int64_t first =
        (static_cast<int64_t>(c.expert) * p.n_a + c.m_block * kBlockM) * p.n_b +
        c.n_block * kBlockN;
    return OutputTile{.origin = static_cast<uint8_t*>(p.d) + first * (p.fp32 ? 4 : 2),
                      .rows = min(kBlockM, p.n_a - c.m_block * kBlockM),
                      .cols = min(kBlockN, p.n_b - c.n_block * kBlockN)};
  }
};

// With p.tensor_store the buffer holds the tile as D's TMA store boxes: 128B-swizzled column
// chunks of 128 bytes a row (32 fp32 or 64 bf16 columns × 128 rows, 16 KiB each, chunk q at
// q·16 KiB), row r at r·128, its 16-byte unit u at (u ^ r % 8)·16 — which also spreads a warp's
// 8 rows of accumulator pairs over all 32 banks. Else rows of kTilePitchF32 bytes
// (bwd::stage_part).
inline constexpr int kChunkBytes = kBlockM * 128;

template <class OutT>
__device__ __forceinline__ void stage_swizzled(const float (&acc)[kAccumulators], uint8_t* tile,
                                               int slab) {
  constexpr int kChunkCols = 128 / int{sizeof(OutT)};
  const bwd::AccPosition pos = bwd::AccPosition::of_thread();
  const int row = slab * (kBlockM / 2) + pos.row;
  const int swizzle = pos.row % 8;  // that of row + 8 too
#pragma unroll
  for (int j = 0; j < kAccumulators / 4; ++j) {
    const int col = 8 * j + pos.col;
    const int byte = (col % kChunkCols) * int{sizeof(OutT)};
    uint8_t* at = tile + (col / kChunkCols) * kChunkBytes + row * 128 +
                  ((byte / 16) ^ swizzle) * 16 + byte % 16;
#pragma unroll
    for (int h = 0; h < 2; ++h)
      cuda::store_pair(reinterpret_cast<OutT*>(at + 8 * h * 128), acc[4 * j + 2 * h],
                       acc[4 * j + 2 * h + 1]);
  }
}

// Consumer side: the warpgroup's 64 × 128 slab into the buffer, fenced for the TMA engine (both
// drains read it through the async proxy), then published.
__device__ __forceinline__ void hand_off(const Fp8WgradProblem& p,
                                         const float (&acc)[kAccumulators], TileHandoff& h,
                                         int slab) {
  if (!p.tensor_store) {
    if (p.fp32) bwd::send_part<float, 0, bwd::kTilePitchF32, true>(acc, h, slab);
    else bwd::send_part<__nv_bfloat16, 0, bwd::kTilePitch, true>(acc, h, slab);
    return;
  }
  h.acquire();
  assume_shared(h.tile);
  if (p.fp32) stage_swizzled<float>(acc, h.tile, slab);
  else stage_swizzled<__nv_bfloat16>(acc, h.tile, slab);
  cute::tma_store_fence();
  h.publish();
}

// The buffer's chunks into D [E, n_a, n_b] by TMA tensor stores (reduce-adds with accumulate;
// TMA clips rows past n_a and columns past n_b), issued by one thread, which then waits until
// they have read the buffer.
__device__ __forceinline__ void store_chunks(const Fp8WgradProblem& p, const CUtensorMap* tmap_d,
                                             const uint8_t* tile, const TileCoord& c) {
  const int chunks = p.fp32 ? kBlockN / 32 : kBlockN / 64, chunk_cols = kBlockN / chunks;
  const int row = c.m_block * kBlockM;
  for (int q = 0; q < chunks; ++q) {
    const int col = c.n_block * kBlockN + q * chunk_cols;
    if (p.accumulate)
      cute::SM90_TMA_REDUCE_ADD_3D::copy(tmap_d, tile + q * kChunkBytes, col, row, c.expert);
    else
      cute::SM90_TMA_STORE_3D::copy(tmap_d, tile + q * kChunkBytes, col, row, c.expert);
  }
  cute::tma_store_arrive();
  cute::tma_store_wait<0>();
}

// Warps 1-3 of warpgroup 0: every tile of this CTA, in the consumers' order: one bulk copy (or
// reduce-add) a buffer row by the 96 threads, or with p.tensor_store the chunks' stores by one
// (the others' arrivals release the buffer only with its).
__device__ __forceinline__ void epilogue_warps(const Fp8WgradProblem& p, const CUtensorMap* tmap_d,
                                               const SharedLayout& smem,
                                               const bwd::WgradTiles<true>& tiles) {
  TileHandoff h = TileHandoff::of(smem);
  const bool leader = threadIdx.x == 32;
  TileCoord c;
  for (int round = -1; tiles.next<true>(round, c);) {
    if (skip_tile(p, expert_groups(smem, c.expert).count)) continue;
    const OutputTile out = OutputTile::of(p, c);
    bwd::receive_tile(h, 1, [&](int, const uint8_t* tile) {
      if (p.tensor_store) {
        if (leader) store_chunks(p, tmap_d, tile, c);
      } else if (p.accumulate) {
        bwd::drain_output<true>(tile, 0, 1, out.origin, true, p.n_b, out.cols, 0, out.rows, 0);
      } else {
        bwd::drain_output<false>(tile, 0, 1, out.origin, p.fp32, p.n_b, out.cols, 0, out.rows, 0);
      }
    });
  }
  if (p.tensor_store && leader) asm volatile("cp.async.bulk.wait_group 0;\n" ::: "memory");
}

__global__ void __launch_bounds__(kThreads, 1)
    fp8_wgrad_kernel(const __grid_constant__ CUtensorMap tmap_a,
                     const __grid_constant__ CUtensorMap tmap_b,
                     const __grid_constant__ CUtensorMap tmap_sa,
                     const __grid_constant__ CUtensorMap tmap_sb,
                     const __grid_constant__ CUtensorMap tmap_d, const Fp8WgradProblem p) {
  extern __shared__ uint8_t smem_raw[];
  const SharedLayout smem = SharedLayout::carve(smem_raw);
  const int n_blocks = ceil_div(p.n_b, kBlockN), m_blocks = ceil_div(p.n_a, kBlockM);
  int* order = expert_order(smem, p.num_experts);
  if (threadIdx.x < 32)
    warp_tile_starts(p.offsets, p.num_experts, fp8::colwise_group_shape(), smem.tile_start);
  if (threadIdx.x == 0) smem.init_barriers(1);
  __syncthreads();
  const bool snake = bwd::order_experts<kThreads, kGroupedGemmMaxExperts>(
      order, p.num_experts, smem.tile_start[p.num_experts],
      [&](int e) { return expert_groups(smem, e).count; });
  const bwd::WgradTiles<true> tiles{.shape = {.block_m = kBlockM, .block_n = kBlockN,
                                              .group_m = kGroupM, .n_blocks = n_blocks},
                                    .m_blocks = m_blocks,
                                    .per_expert = m_blocks * n_blocks,
                                    .total = p.num_experts * m_blocks * n_blocks,
                                    .order = order,
                                    .snake = snake};
  // Warp-uniform roles, so that the producer's loop is convergent.
  const int warp = warp_uniform(threadIdx.x / 32);
  const int warpgroup = warp / 4;

  if (warpgroup == 0) {
    cutlass::arch::warpgroup_reg_dealloc<kProducerRegs>();
    if (warp == 0) produce(&tmap_a, &tmap_b, &tmap_sa, &tmap_sb, smem, tiles);
    else epilogue_warps(p, &tmap_d, smem, tiles);
    return;
  }

  cutlass::arch::warpgroup_reg_alloc<kConsumerRegs>();
  const int slab = warpgroup - 1;
  TileHandoff handoff = TileHandoff::of(smem);
  float acc[kAccumulators];
  PipelineState<kStages> pipe;
  TileCoord c;
  for (int round = -1; tiles.next<true>(round, c);) {
    const int groups = expert_groups(smem, c.expert).count;
    consume_tile(acc, groups, smem, pipe, slab);
    if (skip_tile(p, groups)) continue;
    hand_off(p, acc, handoff, slab);
  }
}

}  // namespace moefuse::gemm::fp8_wgrad
