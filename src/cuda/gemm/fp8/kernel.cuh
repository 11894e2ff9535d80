// The FP8 grouped GEMM kernel (DeepSeek-V3 recipe): persistent (one CTA per SM), in clusters of
// 2 CTAs that share an operand tile by TMA multicast, warp-specialised, 384 threads.
//
// Timeline of a CTA (rank 0 or 1 of cluster `cluster` of `clusters`):
//   all:        warp 0 computes unit_start[] from the offsets (cluster_scheduler.h); thread 0
//               initialises the mbarriers; cluster barrier (both CTAs' barriers exist before any
//               remote arrive or multicast touches them).
//   warpgroup 0 (setmaxnreg down): warp 0 produces (lane 0 issues), walking units cluster,
//               +clusters, ... and filling stages ahead of the consumers (mainloop.cuh has the
//               protocol); with bf16 or E4M3 forward output and in the dGLU, warps 1-3 are the
//               epilogue warps, draining each finished tile from the tile buffer
//               (staged_tile.cuh; e4m3_drain.cuh; dglu_handoff.cuh).
//   warpgroups 1, 2 (consumers, setmaxnreg up): for the same units, this CTA's tile (from the
//               slot the producer wrote before the unit's first stage, common/tile_slots.cuh):
//               the K loop with per-block promotion into N / 2 fp32 registers each (rows 0-63
//               and 64-127 of the 128 × N tile; N 192 with bf16 output, 128 otherwise:
//               config.h Fp8Tile), the two warpgroups issuing their K blocks in turns
//               (issue_turns.cuh), then, by instantiation:
//                 bf16 and E4M3 forward: the hand-off of bf16(h + bias) to the epilogue warps
//                   (the next tile's wgmma overlap this tile's activation and stores; E4M3: the
//                   two CTAs' epilogue warps exchange the rows' amax, e4m3_drain.cuh);
//                 the FC2 dgrad's dGLU (dglu_handoff.cuh): the hand-off of g as bf16, unscaled;
//                   the epilogue warps read pre and write d_pre, scaled_act and the dp partials
//                   while the next tile's wgmma run;
//                 fp32 forward (epilogue.cuh): the epilogue from registers (fp32 must not round
//                   h, and a 64 KB fp32 tile buffer would cost two stages).
//               A phantom unit (no tile for this CTA) only waits for and releases its stages.
//   warpgroup 3 (the dGLU and the E4M3 forward at short K only, 512 threads; setmaxnreg
//               down): four more epilogue warps, draining with warps 1-3 (config.h, Roles, says
//               why).
//   all:        cluster barrier, then exit (no CTA leaves while its peer may still arrive on its
//               empty barriers or multicast into its stages).
//
// Barriers (mbarriers, initialised once; parity waits; phase bits start at 0):
//   full[s]    count 1 + tx bytes              own producer (+ peer's multicast) -> consumers
//   empty[s]   count 16 (8 warps × 2 CTAs)     consumers of both CTAs -> producer
//   tile_full  count 256                       consumers -> epilogue warps
//   tile_empty count 96 or 224                 epilogue warps -> consumers
//              (the hand-off of bf16 forward output and of the dGLU's g: common/tile_handoff.cuh)
//   amax_full[2], amax_empty[2]                the E4M3 GLU output's amax exchange between the
//                                              two CTAs' epilogue warps (e4m3_drain.cuh)
// Each role keeps its own (stage, phase) or tile phase; every role of both CTAs walks the same
// unit list with the same k_blocks per unit; the hand-off roles skip phantoms on both sides.
//
// Walked by hand (bf16 forward and dGLU alike; K = k_blocks, S = kStages):
//   0 units for a cluster (cluster >= total_units, e.g. every expert empty): no role enters its
//     loop; nothing is loaded, waited on or arrived at; both CTAs pass the final cluster barrier.
//   1 unit, both CTAs live (an m-pair): each producer waits empty[s] parity 1 for its first S
//     stages (fresh: passes), expects loads.bytes, copies its own A (2 halves) and multicasts
//     its B half; each full[s] phase completes when both producers' bytes and the own arrive
//     are in. Each CTA's 8 consumer warps, after their wait on full[s], arrive on empty[s] of
//     both CTAs (16 arrivals complete a phase of each); the producers' later waits (parity 0
//     once the ring wraps) need those. Consumers then wait tile_empty parity 1 (fresh), stage,
//     arrive tile_full; epilogue warps wait tile_full parity 0, drain, arrive tile_empty. Every
//     copy has been waited on by the consumers, so none is in flight at the final barrier; the
//     last remote arrives precede it (release/acquire at cluster scope).
//   1 unit, partner phantom (an n-pair, odd m-blocks and odd n-blocks): the phantom's producer
//     multicasts its A half and expects A + scales (no B); its consumers wait and release every
//     stage (so the live CTA's producer never waits on them in vain) and skip the hand-off, as
//     do its epilogue warps. The live CTA runs as above.
//   2 units: stage counters continue (the second unit starts at stage K mod S); consumers wait
//     tile_empty parity 0 before staging tile 2, i.e. until tile 1 is drained; epilogue warps
//     wait tile_full parity 1. A phantom unit between two live ones moves both CTAs' stage
//     counters alike and neither hand-off phase. No waiter can be lapped (mainloop.cuh,
//     common/tile_handoff.cuh).
#pragma once

#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_fp8.h>

#include <cute/arch/cluster_sm90.hpp>
#include <cutlass/arch/reg_reconfig.h>

#include <type_traits>

#include "cuda/gemm/common/cluster.cuh"
#include "cuda/gemm/common/warp_prefix.cuh"
#include "cuda/gemm/epilogues/staged_tile.cuh"
#include "cuda/gemm/fp8/dglu_handoff.cuh"
#include "cuda/gemm/fp8/e4m3_drain.cuh"
#include "cuda/gemm/fp8/epilogue.cuh"
#include "cuda/gemm/fp8/mainloop.cuh"
#include "moefuse/grouped_gemm.h"  // kGroupedGemmMaxExperts

namespace moefuse::gemm::fp8 {

// The epilogue warps (warps 1-3 of warpgroup 0, with seven also warpgroup 3): every live tile the
// consumers stage, in their order, given to drain(tile buffer, its rows, its coordinates, its
// unit) between the hand-off's waits.
template <class Layout, class Drain>
__device__ __forceinline__ void run_epilogue_warps(const Fp8GemmProblem& p, const Layout& smem,
                                                   const TileShape& shape, int total_units,
                                                   int cluster, int clusters, int rank,
                                                   Drain&& drain) {
  TileHandoff handoff = TileHandoff::of(smem);
  for (int u = cluster; u < total_units; u += clusters) {
    const UnitTile w =
        unit_tile(u, p.offsets, smem.unit_start, p.num_experts, shape, rank, p.pairs);
    if (!w.live) continue;
    const TileRows rows = tile_rows<kBlockM>(p, w.tile);
    handoff.wait_full();
    drain(handoff.tile, rows, w.tile, u);
    handoff.release();
  }
}

// OutT: D's element type, bf16, fp32 or E4M3 (__nv_fp8_e4m3: codes and scales, e4m3_drain.cuh;
// forward; unused with the dGLU, which writes dglu's outputs).
// kRoleSet: the warp roles (config.h, Roles): 0 the forward's, 3 or 7 epilogue warps for the
// dGLU (OutT bf16), 7 for the E4M3 forward at short K.
// kN: the tile's columns (config.h, Fp8Tile): kBlockN, or kBf16OutBlockN for the bf16 forward.
template <class OutT, int kRoleSet, int kN = kBlockN>
__global__ void __launch_bounds__(roles(kRoleSet, kN).threads, 1)
    grouped_gemm_fp8_kernel(const __grid_constant__ CUtensorMap tmap_a,
                            const __grid_constant__ CUtensorMap tmap_b,
                            const __grid_constant__ CUtensorMap tmap_scales,
                            const Fp8GemmProblem p, const EpilogueParams ep,
                            const bwd::DGluEpilogue dglu) {
  // The hand-off to the epilogue warps: bf16 and E4M3 forward output and the dGLU (fp32 output
  // keeps its epilogue in the consumers: epilogue.cuh says why).
  static_assert(kRoleSet == 0 || kRoleSet == 3 || kRoleSet == 7, "config.h: Roles");
  constexpr bool kE4m3 = std::is_same_v<OutT, __nv_fp8_e4m3>;
  static_assert(!kE4m3 || kRoleSet != 3, "the E4M3 forward runs three or seven epilogue warps");
  constexpr bool kDGlu = kRoleSet > 0 && !kE4m3;
  constexpr Roles kRoles = roles(kRoleSet, kN);
  constexpr bool kHandoff = kDGlu || kE4m3 || std::is_same_v<OutT, __nv_bfloat16>;
  static_assert(kN == kBlockN || (kRoleSet == 0 && std::is_same_v<OutT, __nv_bfloat16>),
                "wider tiles for the bf16 forward only");
  using G = Fp8Tile<kN>;
  using Layout = TileSharedLayout<G>;
  extern __shared__ uint8_t smem_raw[];
  __shared__ TileSlot tile_slots[kTileSlots];
  static_assert(tile_slots_cover<G::kStages>() &&
                fits_beside_tile_slots(G::smem_bytes(kGroupedGemmMaxExperts)));
  const Layout smem = Layout::carve(smem_raw);
  const TileShape shape{.block_m = kBlockM, .block_n = kN, .group_m = kGroupM,
                        .n_blocks = ceil_div(p.n, kN)};
  const int rank = static_cast<int>(cute::block_rank_in_cluster());
  const int cluster = blockIdx.x / kClusterSize, clusters = gridDim.x / kClusterSize;

  if (threadIdx.x < 32) {
    warp_exclusive_prefix(
        p.num_experts,
        [&](int e) { return expert_units(p.offsets[e + 1] - p.offsets[e], shape, p.pairs); },
        smem.unit_start);
  }
  if (threadIdx.x == 0) smem.init_barriers(kRoles.epilogue_warps * 32);
  cluster_sync_all();
  const int total_units = warp_uniform(smem.unit_start[p.num_experts]);
  const int warpgroup = warp_uniform(threadIdx.x / kWarpgroupThreads);

  constexpr bool kFourthWarpgroup = kRoles.threads > kThreads;  // more epilogue warps
  if (warpgroup == 0 || (kFourthWarpgroup && warpgroup > kConsumerWarpgroups)) {
    cutlass::arch::warpgroup_reg_dealloc<kRoles.producer_regs>();
    // Warp-uniform, so that the producer's loop is convergent (mainloop.cuh, produce).
    if (warp_uniform(threadIdx.x / 32) == 0) {
      produce<G>(&tmap_a, &tmap_b, &tmap_scales, p, smem, shape, total_units, cluster, clusters,
                 rank, tile_slots);
    } else if (kHandoff && threadIdx.x >= 32) {
      auto walk = [&](auto&& drain) {
        run_epilogue_warps(p, smem, shape, total_units, cluster, clusters, rank, drain);
      };
      if constexpr (kDGlu) {
        // One switch on the activation around the tile loop (activation_backward.h says why).
        dispatch_epilogue_op(dglu.act.op, [&](auto op) {
          walk([&](const uint8_t* tile, const TileRows& rows, const TileCoord& c, int) {
            drain_g<decltype(op)::value, kRoles.epilogue_warps, kRoles.drain_octets>(
                tile, p, dglu, rows, c.n_block);
          });
        });
      } else if constexpr (kE4m3) {
        E4m3Drain<kRoles.epilogue_warps * 32> e4m3(smem, rank,
                                                   EpilogueLane::of_thread().worker());
        dispatch_epilogue_op(ep.op, [&](auto op) {
          walk([&](uint8_t* tile, const TileRows& rows, const TileCoord& c, int u) {
            // A GLU's scale groups span the n-pair; the partner may be a phantom.
            const bool peer_live =
                is_glu_op(decltype(op)::value) &&
                unit_tile(u, p.offsets, smem.unit_start, p.num_experts, shape, rank ^ 1,
                          p.pairs)
                    .live;
            e4m3.template drain<decltype(op)::value>(tile, p, ep, rows, c.n_block, peer_live);
          });
        });
      } else {
        walk([&](const uint8_t* tile, const TileRows& rows, const TileCoord& c, int) {
          drain_tile<kBlockM, kN, G::kTilePitch>(tile, p, ep, rows.first, rows.end,
                                                 c.n_block * kN);
        });
      }
    }
  } else {
    cutlass::arch::warpgroup_reg_alloc<kRoles.consumer_regs>();
    const int slab = warpgroup - 1;
    const StageAddresses<G> stages = StageAddresses<G>::of(smem);
    float acc[G::kAccumulators];
    PipelineState<G::kStages> pipe;
    TileHandoff handoff = TileHandoff::of(smem);
    IssueTurns turns(slab);
    for (int u = cluster, i = 0; u < total_units; u += clusters, ++i) {
      ClusterBarrier::wait(&smem.full[pipe.stage], pipe.phase);  // unit i's slot is written
      const TileSlot t = read_tile(tile_slots, i, rank);
      if (!warp_uniform(t.live)) {
        skip_tile(p, smem, pipe);
        continue;
      }
      const TileCoord& c = t.tile;
      const TileRows& rows = t.rows;
      const int n0 = c.n_block * kN;
      RowScales scales;
      if constexpr (kHandoff && !kDGlu)
        scales = prefetch_tile_operands<kBlockM, kN>(ep, slab, c.expert, p.n, n0, rows.first,
                                                     rows.end);
      // The slab as a template argument: its A offset folds into the descriptor constants.
      if (slab == 0) consume_tile<G, 0>(acc, p, stages, pipe, rows.first, n0, turns);
      else consume_tile<G, 1>(acc, p, stages, pipe, rows.first, n0, turns);
      if constexpr (kDGlu) {
        stage_g(acc, handoff, slab);
      } else if constexpr (kHandoff) {
        stage_tile<kBlockM, kN, G::kTilePitch>(acc, handoff, slab, ep, c.expert, p.n, n0,
                                               scales);
      } else {
        epilogue_tile<OutT>(acc, p, ep, c.expert, rows.first + slab * (kBlockM / 2), rows.end,
                            n0);
      }
    }
    turns.finish();
  }
  cluster_sync_all();
}

}  // namespace moefuse::gemm::fp8
