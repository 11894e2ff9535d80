// The dgrad kernel: D[r] = A[r] · B[e] for the rows r of expert e, ragged M from device offsets,
// A [m_cap, K] K-major (one 2D TMA map, boxes of 128 / cluster size rows × 64 K), B [E, K, N]
// used as stored, i.e. MN-major (one 3D TMA map, boxes of 64 N × 64 K, expert outer).
// Persistent, warp-specialised. Three shapes (config.h DgradShape): the plain store (FC1 dgrad)
// and the FC2 dGLU for a long K, 128 × 256 tiles and 384 threads; the FC2 dGLU for a short K,
// 128 × 192 tiles and 512 threads, the fourth warpgroup four more epilogue warps.
// The dGLU shapes run in clusters of C CTAs (S::kCluster: 2 for both; fours measured slower,
// config.h) that share one operand of each group of C tiles by TMA multicast
// (cluster_scheduler.h: C m-blocks of one n-block share the B tile; an expert's left-over
// m-blocks' n-groups the A tile): alone, a 128 × 192 tile loads 1.28 MB of A and B from L2 per
// 2048 of K, and ncu (run 16, qwen3) found the narrow kernel bound by L2 bandwidth (89% of it,
// SM 63%; in pairs still 88%, run 17).
// The plain store runs one CTA a cluster: a unit is a tile (config.h says why).
//
// Timeline of a CTA (rank 0 .. C - 1 of its cluster; rank 0 without clusters):
//   all:        warp 0 scans the unit counts (cluster_scheduler.h) into shared memory; thread 0
//               initialises the mbarriers; cluster barrier (every CTA's barriers exist before
//               any remote arrive or multicast touches them), or __syncthreads without clusters.
//   warpgroup 0, thread 0 (producer): per unit and stage, A as C pieces of 128 / C rows (one
//               128-row box without clusters) and B as N / 64 boxes (64 K × 64 N each); the
//               shared operand's pieces split among the C CTAs (A: piece `rank`; B: boxes rank,
//               rank + C, ...), each multicast to all; the own operand loaded whole. A phantom
//               (no tile, in an n-group past the last n-block) loads only its piece of A. Rows
//               past the expert are loaded (next expert's rows, or zeros past m_cap) and masked
//               in the epilogue; K and N tails are zero-filled by TMA. Before a unit's first
//               stage, its slot for the consumers (common/tile_slots.cuh).
//   warpgroup 0, warps 1-3, and warpgroup 3 if any (epilogue warps): drain each finished tile
//               from the tile buffer: plain store or the FC2 dGLU epilogue (dgrad_epilogue.cuh);
//               phantoms skipped.
//   warpgroups 1, 2 (consumers): per unit, whether it is a phantom from its slot, then wgmma
//               m64nNk16 (A K-major, B MN-major) into N / 2 fp32 registers each, hand the tile
//               over (tile_handoff.cuh: bf16 for bf16 D and the dGLU's g, two fp32 halves for
//               fp32 D) and go on with the next unit. A phantom's consumers wait for and release
//               every stage (mainloop.cuh skip_phantom).
//   all:        cluster barrier (clusters only), then exit (no CTA leaves while a peer may still
//               arrive on its empty barriers or multicast into its stages).
// Synchronisation: the stage mbarriers (mainloop.cuh; full: 1 arrival + the bytes of all the
// producers' copies, empty: lanes 0 .. C - 1 of the 8 consumer warps of every CTA, or all 256
// consumer threads without clusters) and the hand-off's tile_full/tile_empty
// (common/tile_handoff.cuh); no named barrier. The CTAs of a cluster walk the same units with
// the same K blocks, so stage s of round j holds the same K block of the same unit in all; the
// FP8 kernel (fp8/kernel.cuh, fp8/mainloop.cuh) walks the same protocol by hand for pairs,
// including why a peer's early multicast cannot complete a phase.
#pragma once

#include <cuda.h>

#include <cute/arch/cluster_sm90.hpp>
#include <cutlass/arch/reg_reconfig.h>

#include "cuda/gemm/backward/dgrad_epilogue.cuh"
#include "cuda/gemm/backward/mainloop.cuh"
#include "cuda/gemm/backward/tile_handoff.cuh"
#include "cuda/gemm/cluster_scheduler.h"
#include "cuda/gemm/common/cluster.cuh"
#include "cuda/gemm/common/smem_descriptor.cuh"
#include "cuda/gemm/common/tile_slots.cuh"
#include "cuda/gemm/common/warp_prefix.cuh"
#include "moefuse/grouped_gemm.h"  // kGroupedGemmMaxExperts

namespace moefuse::gemm::bwd {

// The producer (one thread): every unit of the cluster (or tile of the CTA), every K block, into
// the stage ring.
template <class G, int kCluster>
__device__ __forceinline__ void produce_dgrad(const CUtensorMap* tmap_a, const CUtensorMap* tmap_b,
                                              const DgradProblem& p, const StagedLayout<G>& smem,
                                              const TileShape& shape, const ClusterUnits& units,
                                              TileSlot* slots) {
  // A in one piece per CTA of the cluster (the tensor map's box): in an n-group each CTA
  // multicasts its piece, otherwise it loads them all.
  constexpr int kPieceRows = kBlockM / kCluster, kPieceBytes = G::kABytes / kCluster;
  const int k_blocks = ceil_div(p.k, G::kBlockK);
  PipelineState<G::kStages> pipe;
  for (int u = units.first, i = 0; u < units.total; u += units.step, ++i) {
    const UnitTile w = cluster_unit_tile<kCluster>(u, p.offsets, smem.tile_start, p.num_experts,
                                                   shape, units.rank);
    const TileRows rows = tile_rows<kBlockM>(p, w.tile);
    const int n0 = w.tile.n_block * G::kN;
    // A (all pieces, from this CTA or its peers) and, unless a phantom, B (idem).
    const int bytes = G::kABytes + (w.live ? G::kBBytes : 0);
    for (int kb = 0; kb < k_blocks; ++kb) {
      ClusterBarrier::wait(&smem.empty[pipe.stage], pipe.phase ^ 1u);
      if (kb == 0) publish_tile(slots, i, w, rows);
      uint64_t* full = &smem.full[pipe.stage];
      ClusterTransactionBarrier::arrive_and_expect_tx(full, bytes);
      const int k0 = kb * G::kBlockK;
      for (int h = 0; h < kCluster; ++h) {
        uint8_t* dst = smem.a_stage(pipe.stage) + h * kPieceBytes;
        const int row = rows.first + h * kPieceRows;
        if (!w.share_a)
          cute::SM90_TMA_LOAD_2D::copy(tmap_a, full, kCacheHintNormal, dst, k0, row);
        else if (h == units.rank)
          cute::SM90_TMA_LOAD_MULTICAST_2D::copy(tmap_a, full, cluster_mask<kCluster>(),
                                                 kCacheHintNormal, dst, k0, row);
      }
      for (int i = 0; i < G::kN / kMnChunk; ++i) {
        uint8_t* dst = smem.b_stage(pipe.stage) + i * G::kMnChunkBytes;
        const int n = n0 + i * kMnChunk;
        if (w.share_a || kCluster == 1) {  // B is this CTA's own (a phantom has none)
          if (w.live)
            cute::SM90_TMA_LOAD_3D::copy(tmap_b, full, kCacheHintNormal, dst, n, k0,
                                         w.tile.expert);
        } else if (i % kCluster == units.rank) {
          cute::SM90_TMA_LOAD_MULTICAST_3D::copy(tmap_b, full, cluster_mask<kCluster>(),
                                                 kCacheHintNormal, dst, n, k0, w.tile.expert);
        }
      }
      pipe.advance();
    }
  }
}

// S: the shape (config.h DgradShape): DgradStoreShape, DgradNarrowStoreShape, DgluWideShape or
// DgluNarrowShape.
template <class S>
__global__ void __launch_bounds__(S::kThreads, 1)
    dgrad_kernel(const __grid_constant__ CUtensorMap tmap_a,
                 const __grid_constant__ CUtensorMap tmap_b, const DgradProblem p,
                 const DGluEpilogue ep) {
  using G = typename S::G;
  extern __shared__ uint8_t smem_raw[];
  __shared__ TileSlot tile_slots[kTileSlots];
  static_assert(tile_slots_cover<G::kStages>() &&
                fits_beside_tile_slots(G::smem_bytes(kGroupedGemmMaxExperts)));
  const StagedLayout<G> smem = StagedLayout<G>::carve(smem_raw);
  assume_shared(smem.tile);
  const TileShape shape{.block_m = kBlockM, .block_n = G::kN, .group_m = kDgradGroupM,
                        .n_blocks = ceil_div(p.n, G::kN)};
  if (threadIdx.x < 32) {
    warp_exclusive_prefix(
        p.num_experts,
        [&](int e) {
          return cluster_expert_units<S::kCluster>(p.offsets[e + 1] - p.offsets[e], shape);
        },
        smem.tile_start);
  }
  if (threadIdx.x == 0)
    smem.init_barriers(1, S::kEpilogueWarps * 32, empty_arrivals<S::kCluster>());
  if constexpr (S::kCluster == 1) __syncthreads();
  else cluster_sync_all();
  const ClusterUnits units{
      .first = static_cast<int>(blockIdx.x) / S::kCluster,
      .step = static_cast<int>(gridDim.x) / S::kCluster,
      .total = warp_uniform(smem.tile_start[p.num_experts]),
      .rank = S::kCluster == 1 ? 0 : static_cast<int>(cute::block_rank_in_cluster())};
  const int k_blocks = ceil_div(p.k, G::kBlockK);
  const int warpgroup = warp_uniform(threadIdx.x / kWarpgroupThreads);

  if (warpgroup == 0 || warpgroup > kConsumerWarpgroups) {
    if constexpr (S::kMovesRegisters) cutlass::arch::warpgroup_reg_dealloc<kProducerRegs>();
    if (threadIdx.x >= 32) {
      if constexpr (S::kGlu) dglu_epilogue_warps<S>(p, ep, smem, shape, units);
      else dgrad_store_epilogue_warps<S>(p, smem, shape, units);
    } else if (threadIdx.x == 0) {
      produce_dgrad<G, S::kCluster>(&tmap_a, &tmap_b, p, smem, shape, units, tile_slots);
    }
  } else {
    if constexpr (S::kMovesRegisters) cutlass::arch::warpgroup_reg_alloc<kConsumerRegs>();
    const int slab = warpgroup - 1;
    TileHandoff handoff = TileHandoff::of(smem);
    float acc[G::kN / 2];
    PipelineState<G::kStages> pipe;
    for (int u = units.first, i = 0; u < units.total; u += units.step, ++i) {
      ClusterBarrier::wait(&smem.full[pipe.stage], pipe.phase);  // unit i's slot is written
      if (!warp_uniform(read_tile(tile_slots, i, units.rank).live)) {
        skip_phantom<S::kCluster>(k_blocks, smem, pipe);
        continue;
      }
      consume_tile<Major::K, Major::MN, G, S::kCluster>(acc, k_blocks, smem, pipe, slab,
                                                        [](int, int) {});
      if constexpr (S::kGlu) {
        send_part<__nv_bfloat16, 0, S::kTilePitch>(acc, handoff, slab);
      } else if constexpr (G::kN != kBlockN) {  // bf16, drained by bulk copies
        send_part<__nv_bfloat16, 0, S::kTilePitch, true, G::kN * 2>(acc, handoff, slab);
      } else {
        hand_off_tile(acc, handoff, slab, p.d_fp32);
      }
    }
  }
  if constexpr (S::kCluster > 1) cluster_sync_all();
}

}  // namespace moefuse::gemm::bwd
