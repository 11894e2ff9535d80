// The grouped GEMM's mainloop: producers that fill the shared-memory stages and the consumer
// warpgroups that run wgmma over them.
//
// Pipeline protocol (kStages stages, each with a `full` and an `empty` mbarrier):
//   producer: wait empty[s] (parity phase ^ 1; a fresh barrier passes), then (a tile's first
//     stage) the tile's slot for the consumers (common/tile_slots.cuh), then
//     TMA variant:    one thread arrive.expect_tx(full[s], A + B bytes), TMA A and TMA B.
//                     full[s] arrive count 1.
//     gather variant: thread 0 arrive.expect_tx(full[s], B bytes) and TMA B; all 128 producer
//                     threads cp.async their A chunks and cp.async.mbarrier.arrive.noinc.
//                     full[s] arrive count 1 + 128.
//   consumers: wait full[s] (parity phase), issue 4 wgmma (K = 64), commit; once the *previous*
//     stage's wgmmas retire (wait_group 1) they release it (common/pipeline.cuh release_stage):
//     every consumer thread on the empty barrier (arrive count 256), or, in a 2-CTA cluster,
//     lane c of each consumer warp on CTA c's (count 16). One wgmma batch stays in flight across
//     stage boundaries.
// Clusters (kCluster 2, TMA variant only): the two CTAs compute a unit of two tiles that share A
// or B (cluster_scheduler.h); each loads its half of the shared operand and multicasts it to
// both, and its own operand whole; a phantom (no tile) loads only its half of A. full[s] expects
// the whole stage's bytes in either case.
// All roles walk the same units and the same number of K blocks per unit, so their (stage,
// phase) counters stay in lockstep across the persistent loop; kernel.cuh walks the whole
// protocol, tile hand-off included, for 0, 1 and 2 tiles per CTA.
#pragma once

#include <cuda_bf16.h>

#include <cute/arch/copy_sm90_tma.hpp>

#include <utility>

#include "cuda/gemm/common/cp_async.cuh"
#include "cuda/gemm/common/handoff_layout.cuh"
#include "cuda/gemm/common/pipeline.cuh"
#include "cuda/gemm/common/smem_descriptor.cuh"
#include "cuda/gemm/common/tile_rows.cuh"
#include "cuda/gemm/common/tile_slots.cuh"
#include "cuda/gemm/common/wgmma.cuh"
#include "cuda/gemm/cluster_scheduler.h"
#include "cuda/gemm/config.h"
#include "cuda/gemm/params.h"

namespace moefuse::gemm {

// A kernel of N-column tiles: its A and B stages (kStages × [kBlockM or N rows × 128 B],
// 128B-swizzled) and the epilogue's staging region (kTileStageBytes): the overlapped epilogue's
// tile buffer, or the in-consumer variants' (fp32 output, gather; N = 256) per-warpgroup staging
// buffers.
template <int N>
using SharedLayout = HandoffSharedLayout<TileConfig<N>::kStages, kABytes, TileConfig<N>::kBBytes,
                                         TileConfig<N>::kTileStageBytes>;

// TMA producer: one thread. A through a 2D map over [m_cap, K] (rows past m_cap zero-filled,
// rows of the next expert loaded and masked in the epilogue); B through a 3D map over
// [E, N, K] with the expert as the outer coordinate (n past N zero-filled, never another expert).
// Both maps' boxes are 1 / kCluster of the tile's rows: each operand goes in kCluster pieces,
// which a unit's shared operand splits among the CTAs (piece `rank`, multicast to all).
template <int kCluster, int N>
__device__ __forceinline__ void produce_tma(const CUtensorMap* tmap_a, const CUtensorMap* tmap_b,
                                            const GemmProblem& p, const SharedLayout<N>& smem,
                                            const TileShape& shape, const ClusterUnits& units,
                                            TileSlot* slots) {
  constexpr int kARows = kBlockM / kCluster, kBRows = N / kCluster;
  constexpr int kBBytes = TileConfig<N>::kBBytes;
  const int k_blocks = ceil_div(p.k, kBlockK);
  PipelineState<TileConfig<N>::kStages> pipe;
  for (int u = units.first, i = 0; u < units.total; u += units.step, ++i) {
    const UnitTile w = cluster_unit_tile<kCluster>(u, p.offsets, smem.tile_start, p.num_experts,
                                                   shape, units.rank);
    const TileRows rows = tile_rows<kBlockM>(p, w.tile);
    const int n0 = w.tile.n_block * N;
    for (int kb = 0; kb < k_blocks; ++kb) {
      ClusterBarrier::wait(&smem.empty[pipe.stage], pipe.phase ^ 1u);
      if (kb == 0) publish_tile(slots, i, w, rows);
      uint64_t* full = &smem.full[pipe.stage];
      // A (all pieces, from this CTA or its peer) and, unless a phantom, B (idem).
      ClusterTransactionBarrier::arrive_and_expect_tx(full, kABytes + (w.live ? kBBytes : 0));
      const int k0 = kb * kBlockK;
      for (int h = 0; h < kCluster; ++h) {
        uint8_t* a = smem.a_stage(pipe.stage) + h * (kABytes / kCluster);
        uint8_t* b = smem.b_stage(pipe.stage) + h * (kBBytes / kCluster);
        if (!w.share_a)
          cute::SM90_TMA_LOAD_2D::copy(tmap_a, full, kCacheHintNormal, a, k0,
                                       rows.first + h * kARows);
        else if (h == units.rank)
          cute::SM90_TMA_LOAD_MULTICAST_2D::copy(tmap_a, full, cluster_mask<kCluster>(),
                                                 kCacheHintNormal, a, k0, rows.first + h * kARows);
        if (w.share_a || kCluster == 1) {  // B is this CTA's own (a phantom has none)
          if (w.live)
            cute::SM90_TMA_LOAD_3D::copy(tmap_b, full, kCacheHintNormal, b, k0, n0 + h * kBRows,
                                         w.tile.expert);
        } else if (h == units.rank) {
          cute::SM90_TMA_LOAD_MULTICAST_3D::copy(tmap_b, full, cluster_mask<kCluster>(),
                                                 kCacheHintNormal, b, k0, n0 + h * kBRows,
                                                 w.tile.expert);
        }
      }
      pipe.advance();
    }
  }
}

// Gather producer (256-column tiles): the 128 threads of warpgroup 0. Thread i copies 16-byte
// chunk i % 8 of rows i / 8 + 16·j (j < 8), so 8 neighbouring threads read one 128-byte row
// segment, written to the 128B-swizzled position TMA would have used: chunk c of row r lands at
// r·128 + (c ^ r % 8)·16.
__device__ __forceinline__ void produce_gather(const CUtensorMap* tmap_b, const GemmProblem& p,
                                               const SharedLayout<kBlockN>& smem,
                                               const TileShape& shape, const ClusterUnits& units,
                                               TileSlot* slots) {
  using Config = TileConfig<kBlockN>;
  constexpr int kChunks = kBlockK * 2 / 16;                     // 8 per 128-byte row
  constexpr int kRowsPerPass = kWarpgroupThreads / kChunks;     // 16
  constexpr int kPasses = kBlockM / kRowsPerPass;               // 8
  const int tid = threadIdx.x;  // 0..127 in warpgroup 0
  const int chunk = tid % kChunks;
  const int row_in_pass = tid / kChunks;
  const int k_blocks = ceil_div(p.k, kBlockK);
  PipelineState<Config::kStages> pipe;
  for (int t = units.first, i = 0; t < units.total; t += units.step, ++i) {
    const TileCoord c = tile_coord(t, p.offsets, smem.tile_start, p.num_experts, shape);
    const TileRows rows = tile_rows<kBlockM>(p, c);
    // The source token of each of this thread's rows; -1 reads zeros.
    int token[kPasses];
#pragma unroll
    for (int j = 0; j < kPasses; ++j) {
      const int r = rows.first + row_in_pass + kRowsPerPass * j;
      const int tok = r < rows.end ? __ldg(p.gather_index + r) : -1;
      token[j] = (tok >= 0 && tok < p.gather_rows) ? tok : -1;
    }
    for (int kb = 0; kb < k_blocks; ++kb) {
      ClusterBarrier::wait(&smem.empty[pipe.stage], pipe.phase ^ 1u);
      uint64_t* full = &smem.full[pipe.stage];
      if (tid == 0) {
        if (kb == 0) publish_tile(slots, i, UnitTile{.tile = c, .share_a = false, .live = true},
                                  rows);
        ClusterTransactionBarrier::arrive_and_expect_tx(full, Config::kBBytes);
        cute::SM90_TMA_LOAD_3D::copy(tmap_b, full, kCacheHintNormal, smem.b_stage(pipe.stage),
                                     kb * kBlockK, c.n_block * kBlockN, c.expert);
      }
      const int k_col = kb * kBlockK + chunk * 8;
      const bool k_ok = k_col < p.k;
      uint8_t* a_stage = smem.a_stage(pipe.stage);
#pragma unroll
      for (int j = 0; j < kPasses; ++j) {
        const int r = row_in_pass + kRowsPerPass * j;
        const bool ok = k_ok && token[j] >= 0;
        const __nv_bfloat16* src =
            ok ? p.gather_x + static_cast<int64_t>(token[j]) * p.k + k_col : p.gather_x;
        cp_async_16(a_stage + r * 128 + ((chunk ^ (r % 8)) * 16), src, ok ? 16 : 0);
      }
      cutlass::arch::cpasync_barrier_arrive_noinc(full);
      pipe.advance();
    }
  }
  // Do not leave the kernel with copies in flight.
  asm volatile("cp.async.wait_all;\n" ::: "memory");
}

// One tile's K loop for consumer warpgroup `slab` (0 or 1: rows 64·slab .. 64·slab + 63).
template <bool kGather, int kCluster, int N>
__device__ __forceinline__ void consume_tile(float (&acc)[N / 2], const GemmProblem& p,
                                             const SharedLayout<N>& smem,
                                             PipelineState<TileConfig<N>::kStages>& pipe,
                                             int slab) {
#pragma unroll
  for (int i = 0; i < N / 2; ++i) acc[i] = 0.0f;
  fence_accumulators(acc);
  const int k_blocks = ceil_div(p.k, kBlockK);
  int previous_stage = -1;
  for (int kb = 0; kb < k_blocks; ++kb) {
    ClusterBarrier::wait(&smem.full[pipe.stage], pipe.phase);
    // cp.async wrote A through the generic proxy; wgmma reads through the async proxy.
    if constexpr (kGather) cutlass::arch::fence_view_async_shared();
    const uint64_t desc_a = smem_descriptor(smem.a_stage(pipe.stage) + slab * (kBlockM / 2) * 128);
    const uint64_t desc_b = smem_descriptor(smem.b_stage(pipe.stage));
    cute::warpgroup_arrive();
#pragma unroll
    for (int k = 0; k < kBlockK / kWgmmaK; ++k) {
      // +32 bytes of K per step = +2 in the descriptor's address field (smem_descriptor).
      wgmma_m64k16<N, Major::K, Major::K>(desc_a + 2 * k, desc_b + 2 * k, acc,
                                          std::make_index_sequence<N / 2>{});
    }
    cute::warpgroup_commit_batch();
    cute::warpgroup_wait<1>();
    fence_accumulators(acc);
    if (previous_stage >= 0) release_stage<kCluster>(&smem.empty[previous_stage]);
    previous_stage = pipe.stage;
    pipe.advance();
  }
  cute::warpgroup_wait<0>();
  fence_accumulators(acc);
  release_stage<kCluster>(&smem.empty[previous_stage]);
}

}  // namespace moefuse::gemm
