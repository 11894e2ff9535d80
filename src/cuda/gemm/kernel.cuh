// The grouped GEMM kernel: persistent (one CTA per SM), warp-specialised, 384 threads. The
// overlapped variant may run in 2-CTA clusters (kCluster, config.h kForwardCluster): the CTAs of
// a cluster walk units of two tiles that share one operand by TMA multicast (cluster_scheduler.h,
// mainloop.cuh); without clusters a unit is a tile. The protocol below is written for units.
//
// Timeline of a CTA:
//   all:        warp 0 computes the unit starts (tile_start[]) from the offsets; thread 0
//               initialises the mbarriers; __syncthreads (the only CTA-wide barrier), or the
//               cluster barrier (every CTA's barriers exist before a peer's arrive or multicast;
//               again before exit, so that no CTA leaves while a peer may still reach it).
//   warpgroup 0 (setmaxnreg down): produces, walking units blockIdx.x / kCluster, + the grid's
//               clusters, ... and
//               filling stages ahead of the consumers (mainloop.cuh has the protocol; thread 0
//               alone issues TMA in the plain variant, all 128 threads issue cp.async in the
//               gather variant); in the overlapped variant warps 1-3 are the epilogue warps,
//               draining each finished tile from shared memory to global memory
//               (epilogues/staged_tile.cuh).
//   warpgroups 1, 2 (consumers, setmaxnreg up): for the same tiles, as the producer describes
//               them in the tile slots (common/tile_slots.cuh; read after the wait on each
//               tile's first stage): the epilogue's row scales and bias fetched, the K loop of
//               wgmma into 128 fp32 registers each (rows 0-63 and 64-127 of the tile), then
//               either the hand-off to the epilogue warps (bf16 output: the next tile's MMAs
//               overlap this tile's stores) or the in-consumer epilogue (fp32 output, which must
//               not round h to bf16, and the gather variant, whose producer needs all of
//               warpgroup 0). A phantom's consumers wait for and release every stage
//               (common/pipeline.cuh skip_phantom); its epilogue warps skip it.
//
// Barriers (all mbarriers, initialised once; parity waits; phase bits start at 0):
//   full[s]    count 1 + tx bytes   producer -> consumers   (mainloop.cuh; gather: 1 + 128)
//   empty[s]   count 256            consumers -> producer (16 in a cluster: common/pipeline.cuh)
//   tile_full  count 256            consumers -> epilogue warps (overlapped variant only;
//   tile_empty count 96             epilogue warps -> consumers  common/tile_handoff.cuh)
// Each role keeps its own (stage, phase) or tile phase and every role walks the same tile list
// (units u = blockIdx.x / kCluster, + the grid's clusters, ... < the unit count; without a
// cluster a unit is a tile) with the same k_blocks per tile.
//
// Walked by hand (overlapped variant; K = k_blocks K blocks per tile, S = kStages):
//   0 tiles (first unit >= the unit count, e.g. every expert empty): no role enters its loop; no
//     barrier is waited on or arrived at, no copy is in flight; every thread returns.
//   1 tile: the producer waits empty[s] with parity 1 for its first S stages (fresh barriers pass
//     at once), later with parity 0 after the consumers' first arrivals; each full[s] phase
//     completes after the producer's arrive.expect_tx and all counted bytes. Consumers wait
//     full[s] with parity 0 (then 1 once the stages wrap) and arrive on empty[s] for every stage,
//     the last one after wait_group 0, so the producer's K waits are all satisfied and no TMA is
//     left in flight when the consumers leave (they have waited on every full phase). Consumers
//     wait tile_empty parity 1 (fresh: passes), stage, arrive tile_full (256 -> phase 0 done);
//     the epilogue warps wait tile_full parity 0, drain, arrive tile_empty (96 -> phase 0 done)
//     and return. Nobody waits on tile_empty's completed phase, which is harmless.
//   2 tiles: the stage counters simply continue (the K loops of tile 2 start at stage K mod S).
//     Consumers wait tile_empty with parity 0 before staging tile 2, i.e. until the epilogue
//     warps' tile-1 arrivals complete phase 0, so the buffer is never overwritten while drained;
//     the epilogue warps wait tile_full with parity 1 for tile 2. Each barrier's phase advances
//     at most once per tile and each waiter waits on every phase in order, so no waiter can be
//     lapped (a parity wait would then pass spuriously).
// The in-consumer variants (fp32 output, gather) walk the same stage ring without the hand-off.
// In the gather variant a full[s] phase also needs the 128 producer threads' cp.async arrivals,
// each made once that thread's copies into the stage have landed; a row past the expert's end
// or with an index outside [0, T) is copied with src-size 0 (zeros), so every stage gets all
// 128 arrivals even for a tile with no valid row, and the producer waits for its last copies
// before it returns.
#pragma once

#include <cuda.h>
#include <cuda_bf16.h>

#include <cute/arch/cluster_sm90.hpp>
#include <cutlass/arch/reg_reconfig.h>

#include <type_traits>

#include "cuda/gemm/cluster_scheduler.h"
#include "cuda/gemm/common/cluster.cuh"
#include "cuda/gemm/common/warp_prefix.cuh"
#include "cuda/gemm/epilogues/register_epilogue.cuh"
#include "cuda/gemm/epilogues/staged_tile.cuh"
#include "cuda/gemm/mainloop.cuh"
#include "moefuse/grouped_gemm.h"  // kGroupedGemmMaxExperts

namespace moefuse::gemm {

// Warps 1-3 of warpgroup 0: drain every tile the consumers stage, in the consumers' order
// (phantoms have none).
template <int kCluster, int N>
__device__ __forceinline__ void run_epilogue_warps(const GemmProblem& p, const EpilogueParams& ep,
                                                   const SharedLayout<N>& smem,
                                                   const TileShape& shape,
                                                   const ClusterUnits& units) {
  TileHandoff handoff = TileHandoff::of(smem);
  for (int u = units.first; u < units.total; u += units.step) {
    const UnitTile w = cluster_unit_tile<kCluster>(u, p.offsets, smem.tile_start, p.num_experts,
                                                   shape, units.rank);
    if (!w.live) continue;
    const TileCoord& c = w.tile;
    const TileRows rows = tile_rows<kBlockM>(p, c);
    handoff.wait_full();
    drain_tile<kBlockM, N, TileConfig<N>::kTilePitch>(handoff.tile, p, ep, rows.first, rows.end,
                                                      c.n_block * N);
    handoff.release();
  }
}

// kCluster: CTAs a cluster, 1 or 2 (kClusterSize; the overlapped variant only: config.h
// kForwardCluster says which launches use it). kN: tile columns, 256, or 192 in the overlapped
// variant (config.h narrow_width).
template <class OutT, bool kGather, int kCluster, int kN>
__global__ void __launch_bounds__(kThreads, 1)
    grouped_gemm_kernel(const __grid_constant__ CUtensorMap tmap_a,
                        const __grid_constant__ CUtensorMap tmap_b, const GemmProblem p,
                        const EpilogueParams ep) {
  constexpr bool kOverlap = std::is_same_v<OutT, __nv_bfloat16> && !kGather;
  static_assert(kCluster == 1 || (kCluster == kClusterSize && kOverlap));
  static_assert(kN == kBlockN || kOverlap, "the in-consumer epilogues are written for 256");
  using Layout = SharedLayout<kN>;
  extern __shared__ uint8_t smem_raw[];
  __shared__ TileSlot tile_slots[kTileSlots];
  static_assert(tile_slots_cover<TileConfig<kN>::kStages>() &&
                fits_beside_tile_slots(TileConfig<kN>::smem_bytes(kGroupedGemmMaxExperts)));
  const Layout smem = Layout::carve(smem_raw);
  const TileShape shape{.block_m = kBlockM, .block_n = kN, .group_m = kGroupM,
                        .n_blocks = ceil_div(p.n, kN)};

  if (threadIdx.x < 32) {
    warp_exclusive_prefix(
        p.num_experts,
        [&](int e) {
          return cluster_expert_units<kCluster>(p.offsets[e + 1] - p.offsets[e], shape);
        },
        smem.tile_start);
  }
  if (threadIdx.x == 0)
    smem.init_barriers(kGather ? 1 + kWarpgroupThreads : 1, kEpilogueThreads,
                       empty_arrivals<kCluster>());
  if constexpr (kCluster == 1) __syncthreads();
  else cluster_sync_all();
  const ClusterUnits units{
      .first = static_cast<int>(blockIdx.x) / kCluster,
      .step = static_cast<int>(gridDim.x) / kCluster,
      .total = warp_uniform(smem.tile_start[p.num_experts]),
      .rank = kCluster == 1 ? 0 : static_cast<int>(cute::block_rank_in_cluster())};
  const int warpgroup = threadIdx.x / kWarpgroupThreads;

  if (warpgroup == 0) {
    cutlass::arch::warpgroup_reg_dealloc<kProducerRegs>();
    if constexpr (kGather) {
      produce_gather(&tmap_b, p, smem, shape, units, tile_slots);
    } else if (threadIdx.x == 0) {
      produce_tma<kCluster, kN>(&tmap_a, &tmap_b, p, smem, shape, units, tile_slots);
    } else if (kOverlap && threadIdx.x >= 32) {
      run_epilogue_warps<kCluster, kN>(p, ep, smem, shape, units);
    }
  } else {
    cutlass::arch::warpgroup_reg_alloc<kConsumerRegs>();
    const int slab = warpgroup - 1;
    float acc[kN / 2];
    PipelineState<TileConfig<kN>::kStages> pipe;
    TileHandoff handoff = TileHandoff::of(smem);
    for (int u = units.first, i = 0; u < units.total; u += units.step, ++i) {
      ClusterBarrier::wait(&smem.full[pipe.stage], pipe.phase);  // unit i's slot is written
      const TileSlot t = read_tile(tile_slots, i, units.rank);
      if (!warp_uniform(t.live)) {
        skip_phantom<kCluster>(ceil_div(p.k, kBlockK), smem, pipe);
        continue;
      }
      const TileCoord& c = t.tile;
      if constexpr (kOverlap) {
        const RowScales scales = prefetch_tile_operands<kBlockM, kN>(
            ep, slab, c.expert, p.n, c.n_block * kN, t.rows.first, t.rows.end);
        consume_tile<kGather, kCluster, kN>(acc, p, smem, pipe, slab);
        stage_tile<kBlockM, kN, TileConfig<kN>::kTilePitch>(acc, handoff, slab, ep, c.expert, p.n,
                                                           c.n_block * kN, scales);
      } else {
        consume_tile<kGather, kCluster, kN>(acc, p, smem, pipe, slab);
        epilogue_tile<OutT>(acc, p, ep, smem.tile + slab * kStageBytes, slab, c.expert,
                            t.rows.first + slab * (kBlockM / 2), t.rows.end, c.n_block * kN);
      }
    }
  }
  // No CTA leaves while its peer may still arrive on its empty barriers or multicast into it.
  if constexpr (kCluster > 1) cluster_sync_all();
}

}  // namespace moefuse::gemm
