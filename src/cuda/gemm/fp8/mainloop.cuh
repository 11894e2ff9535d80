// The FP8 grouped GEMM's mainloop: the TMA producer, which shares one operand per work unit
// with the other CTA of its 2-CTA cluster by multicast, and the consumer warpgroups that run
// e4m3 wgmma per K block and promote each block's result into fp32 registers with its scales.
//
// Pipeline protocol (per CTA kStages stages, each with a `full` and an `empty` mbarrier; both
// CTAs of a cluster walk the same work units (cluster_scheduler.h) with the same K blocks, so
// stage s in round j means the same K block of the same unit in both):
//   full[s]   count 1 (the own producer's arrive.expect_tx) + the stage's transaction bytes,
//             which come from the own producer's and the peer producer's copies;
//   empty[s]  count kEmptyArrivals = 16: lane c of each of the 8 consumer warps of EACH CTA
//             arrives on the empty[s] of CTA c (c = 0, 1; a remote arrive through mapa).
//   producer (warp 0, lane 0 issuing: produce() says why), per K block: wait own empty[s]
//     (parity phase ^ 1; a fresh barrier passes) — complete only when the consumers of BOTH
//     CTAs have released stage s, since the multicast below writes into both —; a live tile's
//     weight scale of the K block into the scale slot behind the box (kBScaleOffset: a plain
//     st.shared, loaded from global before the wait; a 192-wide tile's two, config.h Fp8Tile),
//     which the arrive below releases and the consumers' wait acquires;
//     arrive.expect_tx(own full[s], loads.bytes); then
//       the shared operand: its half (rows 64·rank .. of A, kN/2·rank .. of B) multicast (mask
//         0b11) to the same offset of both CTAs, signalling full[s] at the same offset in each;
//       its own operand: both halves, to itself;
//       its tile rows' activation scales (one box from the row rounded down to 4; config.h),
//       to itself.
//     A half whose first row lies past the tensor (rows past m_cap, or columns past N for B) is
//     not loaded and not counted: the stale bytes feed only rows or columns that are never
//     written (wgmma keeps rows of A and rows of B apart). Both CTAs make the same decision for
//     the shared operand (same rows), so each receives exactly loads.bytes. A phantom (no tile)
//     loads no B; its half of A is still multicast for its partner.
//     The peer's multicast may complete_tx on our full[s] before our own expect_tx: the tx count
//     goes negative for a moment and the phase cannot complete before our arrive. It cannot hit
//     the previous phase: the peer issues it after its empty[s] completed, which needs our
//     consumers' release of the previous round, which follows their wait on that phase.
//   consumers (256 threads): wait full[s] (parity phase); read their rows' two activation
//     scales, and the weight scale by the lane that releases the stage in this CTA (lane rank:
//     its read precedes that arrive in its own program order, which racecheck and the memory
//     model both see; a __syncwarp between other lanes' reads and the arrive did not satisfy
//     racecheck), passed to the warp by a shuffle. The row scales are rewritten only by the next
//     round's TMA; every lane has used its two (the products below) before the arrive is
//     issued, the warp being convergent there. 4 wgmma m64nNk32 into a fresh fp32 block
//     accumulator (the first with scale-d 0); commit; wait_group 0 (every lane of the warp is
//     past it: .sync.aligned); lanes 0 and 1 arrive on empty[s] of CTA 0 and CTA 1; then promote:
//     acc += block · (a_scale · b_scale).
//     A phantom's consumers wait full[s] and release, without wgmma (the release must follow the
//     wait, or the next round's copies could land in this round's phase).
//   No waiter is lapped: the empty barriers, not the bytes, keep the CTAs within one round of
//   each other (a stage may hold bytes of one producer only, e.g. when the peer's half is past
//   m_cap or N): a CTA's round j + 1 of stage s starts after its empty[s] round j, which needs
//   the peer's consumers' release of round j, which follows the peer's full[s] round j.
// The stage is released before the promotion, so the producers refill it while the FMAs run;
// the two consumer warpgroups issue their K blocks in turns (issue_turns.cuh), so one's wgmma
// overlaps the other's promotion.
#pragma once

#include <cute/arch/mma_sm90_gmma.hpp>

#include <utility>

#include "cuda/gemm/common/cluster.cuh"
#include "cuda/gemm/common/pipeline.cuh"
#include "cuda/gemm/common/smem_descriptor.cuh"
#include "cuda/gemm/common/tile_rows.cuh"
#include "cuda/gemm/common/tile_slots.cuh"
#include "cuda/gemm/common/tma_issue.cuh"
#include "cuda/gemm/common/wgmma.cuh"
#include "cuda/gemm/cluster_scheduler.h"
#include "cuda/gemm/fp8/config.h"
#include "cuda/gemm/fp8/issue_turns.cuh"
#include "cuda/gemm/fp8/params.h"
#include "cuda/gemm/fp8/shared.cuh"

namespace moefuse::gemm::fp8 {

// What the producer copies into every stage of one unit (the same for all its K blocks). The
// halves are bit masks (bit h: half h, 64 rows of A or kN / 2 of B, has its first row inside the
// tensor), so that indexing them by the CTA's rank needs no local memory.
struct StageLoads {
  uint32_t a_halves;
  uint32_t b_halves;
  bool scales;
  int bytes;  // what full[s] expects
};

template <class G>
__device__ __forceinline__ StageLoads stage_loads(const Fp8GemmProblem& p, const UnitTile& w,
                                                  const TileRows& rows) {
  StageLoads l{};
#pragma unroll
  for (int h = 0; h < kClusterSize; ++h) {
    const bool a = rows.first + h * kHalfRows < p.m_cap;
    const bool b = w.live && w.tile.n_block * G::kBlockN + h * G::kBHalfRows < p.n;
    l.a_halves |= uint32_t{a} << h;
    l.b_halves |= uint32_t{b} << h;
    l.bytes += a * kHalfBytes + b * G::kBHalfBytes;
  }
  l.scales = rows.first < p.m_cap;
  l.bytes += l.scales * kScaleBytes;
  return l;
}

// The stages as 32-bit shared addresses and wgmma descriptor low words (smem_descriptor.cuh): a
// base plus constants and the stage, for the producer's and the consumers' loops. Run 9's ncu
// found the consumers' K loop issue-bound; its SASS spent 88 of 156 instructions per K block
// (besides 64 FFMA and 4 QGMMA) on generic addresses and loads, a global load of the weight
// scale, 64-bit descriptor adds with their moves and R2UR copies, and stage, barrier-id and
// address recomputation. With these bases, the slab a template argument and the stage
// warp-uniform (kernel.cuh, warp_uniform) it is 40-45 (CUDA 13.0): the stage and descriptor
// arithmetic in uniform registers (one UIADD3.64 per descriptor and K step), the scales by LDS.
template <class G>
struct StageAddresses {
  using Layout = TileSharedLayout<G>;
  uint32_t base;  // shared address of Layout::a
  uint32_t desc;  // its low descriptor word

  __device__ static StageAddresses of(const Layout& smem) {
    const uint32_t base = shared_address(smem.a);
    return StageAddresses{.base = base, .desc = sw128_descriptor_low(base)};
  }
  __device__ uint32_t full(uint32_t stage) const {
    return base + Layout::kFullOffset + stage * uint32_t{sizeof(uint64_t)};
  }
  __device__ uint32_t empty(uint32_t stage) const {
    return base + Layout::kEmptyOffset + stage * uint32_t{sizeof(uint64_t)};
  }
  __device__ uint32_t a(uint32_t stage) const { return base + stage * kABytes; }
  __device__ uint32_t b(uint32_t stage) const {
    return base + Layout::kBOffset + stage * G::kBBytes;
  }
  __device__ uint32_t scale_slot(uint32_t stage) const {
    return base + Layout::kScaleOffset + stage * kScaleSlotBytes;
  }
  // Descriptor units are 16 bytes.
  template <int kSlab>
  __device__ uint32_t desc_a(uint32_t stage) const {
    return desc + kSlab * (kHalfBytes / 16) + stage * (kABytes / 16);
  }
  __device__ uint32_t desc_b(uint32_t stage) const {
    return desc + Layout::kBOffset / 16 + stage * (G::kBBytes / 16);
  }
  static_assert(G::kBBytes % 16 == 0 && Layout::kBOffset % 16 == 0);
};
static_assert(kHalfBytes == (kBlockM / kConsumerWarpgroups) * kSwizzleRowBytes,
              "a consumer's 64-row A slab is one half of the A stage");
static_assert(kHalfBytes % 16 == 0 && kABytes % 16 == 0);

// Warp 0 of the CTA produces. Every lane walks the loop and computes the same values, made
// warp-uniform (cluster.cuh) so that ptxas keeps the TMA operands in uniform registers; lane 0
// issues. Run 22's ncu (call 4) had a single producing thread as the mainloop's bound: its
// coordinates in vector registers made every TMA a waterfall loop (ELECT, R2UR of each operand,
// BRA.U.ANY), ~130 instructions a K block, and each K block's weight scale waited for its own
// global load; the consumers waited on stage data in 14.5% of all samples while the producer
// never waited for a free stage. Now a lane loads the scales of 32 K blocks at once and a
// shuffle hands each K block its own.
//
// A through a 2D map over [m_cap, K] and B through a 3D map over [E, N, K], in boxes of 64 rows
// (A) and kN / 2 rows (B) × 128 bytes (rows of the next expert loaded and masked in the
// epilogue; n past N zero-filled, never another expert); the scales through a 2D map over
// [ceil(K/128), fp8_scale_rows(m_cap)] in boxes of kScaleBoxRows. K past the end is zero-filled
// in A and B, so a short last K block adds nothing extra.
template <class G>
__device__ __forceinline__ void produce(const CUtensorMap* tmap_a, const CUtensorMap* tmap_b,
                                        const CUtensorMap* tmap_scales, const Fp8GemmProblem& p,
                                        const TileSharedLayout<G>& smem, const TileShape& shape,
                                        int total_units, int cluster, int clusters, int rank,
                                        TileSlot* slots) {
  const int k_blocks = ceil_div(p.k, kBlockK);
  const int n_groups = ceil_div(p.n, kWeightBlock);
  const int lane = threadIdx.x % 32;
  const bool issues = lane == 0;
  const StageAddresses<G> st = StageAddresses<G>::of(smem);
  PipelineState<G::kStages> pipe;
  for (int u = cluster, i = 0; u < total_units; u += clusters, ++i) {
    UnitTile w = unit_tile(u, p.offsets, smem.unit_start, p.num_experts, shape, rank, p.pairs);
    w.tile = TileCoord{.expert = warp_uniform(w.tile.expert),
                       .m_block = warp_uniform(w.tile.m_block),
                       .n_block = warp_uniform(w.tile.n_block)};
    w.share_a = warp_uniform(w.share_a);
    w.live = warp_uniform(w.live);
    TileRows rows = tile_rows<kBlockM>(p, w.tile);
    rows.first = warp_uniform(rows.first);
    const StageLoads loads = stage_loads<G>(p, w, rows);
    const int n_first = w.tile.n_block * G::kBlockN;
    // The tile's weight scales [k_blocks] (expert and weight block fixed), of its first weight
    // block and, in a tile wider than 128, of the next one (clamped to the last: its columns
    // past N are never written); a phantom has none.
    const int group = n_first / kWeightBlock;
    const float* b_scale =
        p.b_scales + (static_cast<int64_t>(w.tile.expert) * n_groups + group) * k_blocks;
    const float* b_scale_next = b_scale + (group + 1 < n_groups ? k_blocks : 0);
    float b_scales = 0.0f, b_scales_next = 0.0f;  // lane l: K block 32·(kb / 32) + l's
    for (int kb = 0; kb < k_blocks; ++kb) {
      // Issued before the wait on empty[s], which hides its latency once the producer runs
      // ahead; the weight scale then goes through the stage (the protocol above), so that the
      // consumers read it by LDS with the row scales.
      if (kb % 32 == 0) {
        const bool loads_scale = w.live && kb + lane < k_blocks;
        b_scales = loads_scale ? __ldg(b_scale + kb + lane) : 0.0f;
        if constexpr (G::kBlockN > kWeightBlock)
          b_scales_next = loads_scale ? __ldg(b_scale_next + kb + lane) : 0.0f;
      }
      const uint32_t stage = pipe.stage;
      wait_barrier(st.empty(stage), pipe.phase ^ 1u);
      if (issues && kb == 0) publish_tile(slots, i, w, rows);
      const float sb = __shfl_sync(~0u, b_scales, kb % 32);
      if (issues && w.live) st_shared_f32(st.scale_slot(stage) + kBScaleOffset, sb);
      if constexpr (G::kBlockN > kWeightBlock) {
        const float sb_next = __shfl_sync(~0u, b_scales_next, kb % 32);
        if (issues && w.live) st_shared_f32(st.scale_slot(stage) + kBScaleOffset + 4, sb_next);
      }
      const uint32_t full = st.full(stage);
      arrive_expect_tx_if(issues, full, loads.bytes);
      const int k0 = kb * kBlockK;
      // Half h of A or B; mask 0: to this CTA only.
      auto load_a = [&](int h, uint16_t mask) {
        tma_load_2d_if(issues && (loads.a_halves >> h & 1u), tmap_a, full,
                       st.a(stage) + h * kHalfBytes, k0, rows.first + h * kHalfRows, mask);
      };
      auto load_b = [&](int h, uint16_t mask) {
        tma_load_3d_if(issues && (loads.b_halves >> h & 1u), tmap_b, full,
                       st.b(stage) + h * G::kBHalfBytes, k0, n_first + h * G::kBHalfRows,
                       w.tile.expert, mask);
      };
      if (w.share_a) {
        load_a(rank, kClusterMask);
#pragma unroll
        for (int h = 0; h < kClusterSize; ++h) load_b(h, 0);
      } else {
        load_b(rank, kClusterMask);
#pragma unroll
        for (int h = 0; h < kClusterSize; ++h) load_a(h, 0);
      }
      tma_load_2d_if(issues && loads.scales, tmap_scales, full, st.scale_slot(stage),
                     scale_box_row(rows.first), kb);
      pipe.advance();
    }
  }
}

// Lane c of the warp releases the stage in CTA c of the cluster (c < kClusterSize).
template <class Layout>
__device__ __forceinline__ void release_stage(const Layout& smem, int stage) {
  const uint32_t lane = threadIdx.x % 32;
  ClusterBarrier::arrive(&smem.empty[stage], lane, lane < kClusterSize);
}

// A phantom's K loop: every stage waited for and released, nothing computed.
template <class G>
__device__ __forceinline__ void skip_tile(const Fp8GemmProblem& p,
                                          const TileSharedLayout<G>& smem,
                                          PipelineState<G::kStages>& pipe) {
  const int k_blocks = ceil_div(p.k, kBlockK);
  for (int kb = 0; kb < k_blocks; ++kb) {
    ClusterBarrier::wait(&smem.full[pipe.stage], pipe.phase);
    release_stage(smem, pipe.stage);
    pipe.advance();
  }
}

// The e4m3 × e4m3 → f32 wgmma of a 64-row slab and an N-column stage, K = 32.
template <int N>
struct WgmmaE4m3;
template <>
struct WgmmaE4m3<128> {
  using Mma = cute::SM90::GMMA::MMA_64x128x32_F32E4M3E4M3_SS_TN<>;
};
template <>
struct WgmmaE4m3<192> {
  using Mma = cute::SM90::GMMA::MMA_64x192x32_F32E4M3E4M3_SS_TN<>;
};

// block (=|+)= A_slab · B_stageᵀ over one k32 step.
template <int N, size_t... I>
__device__ __forceinline__ void wgmma_m64k32(uint64_t desc_a, uint64_t desc_b,
                                             float (&block)[N / 2],
                                             cute::SM90::GMMA::ScaleOut scale_d,
                                             std::index_sequence<I...>) {
  WgmmaE4m3<N>::Mma::fma(desc_a, desc_b, block[I]..., scale_d);
}

// acc += block · scale, one FFMA per element: column group j (8 columns, acc[4j .. 4j + 3])
// scaled by the first weight block's products (s0, s1: rows h = 0, 1) below kSecond, by the
// next block's (t0, t1) from it.
template <int kGroups, int kSecond>
__device__ __forceinline__ void promote(float (&acc)[4 * kGroups],
                                        const float (&block)[4 * kGroups], float s0, float s1,
                                        float t0, float t1) {
#pragma unroll
  for (int j = 0; j < kGroups; ++j) {
    const float r0 = j < kSecond ? s0 : t0, r1 = j < kSecond ? s1 : t1;
    acc[4 * j + 0] = fmaf(r0, block[4 * j + 0], acc[4 * j + 0]);
    acc[4 * j + 1] = fmaf(r0, block[4 * j + 1], acc[4 * j + 1]);
    acc[4 * j + 2] = fmaf(r1, block[4 * j + 2], acc[4 * j + 2]);
    acc[4 * j + 3] = fmaf(r1, block[4 * j + 3], acc[4 * j + 3]);
  }
}

// promote<kN / 8, second>, `second` being second_weight_group<kN>(the tile's n0) (config.h): a
// warp-uniform branch, not a select per element.
template <int kN>
__device__ __forceinline__ void promote_tile(float (&acc)[kN / 2], const float (&block)[kN / 2],
                                             int second, float s0, float s1, float t0,
                                             float t1) {
  constexpr int kGroups = kN / 8;
  if constexpr (kN == kWeightBlock) {
    promote<kGroups, kGroups>(acc, block, s0, s1, t0, t1);
  } else {
    static_assert(kN == 192, "a 192-wide tile starts at 0 or 64 of a weight block");
    if (second == 16) promote<kGroups, 16>(acc, block, s0, s1, t0, t1);
    else promote<kGroups, 8>(acc, block, s0, s1, t0, t1);
  }
}

// One tile's K loop for consumer warpgroup kSlab (rows 64·kSlab .. 64·kSlab + 63 of the tile).
// first_row: the tile's first row (where its scales sit in the scale box).
// Accumulator layout (m64nN f32): acc[4j + 2h + i] is row 16·warp + lane/4 + 8h of the slab,
// column 8j + 2·(lane % 4) + i, so h picks the row and with it the activation scale.
// Per K block: wait full[s]; load the two row scales and the weight scale(s) (LDS, before the
// wgmma, as the stage is released right after it); 4 wgmma into `block`, the first with
// scale-d 0 (which zeroes it: no zeroing instructions); commit; wait; release the stage; then
// acc += block · (a_scale · b_scale), one FFMA per element, b_scale being the column's weight
// block's (promote_tile): the arithmetic of the first version
// (the product rounded to fp32, one fmaf per element, K blocks in order). The products are
// written after the wait so that nothing between the full-barrier wait and the first wgmma
// waits on a load (ptxas puts them behind the first QGMMA); the first version multiplied a
// global and a generic load's results there, and its first wgmma waited for both.
// n0: the tile's first column (where its weight blocks switch: second_weight_group).
template <class G, int kSlab>
__device__ __forceinline__ void consume_tile(float (&acc)[G::kAccumulators],
                                             const Fp8GemmProblem& p, const StageAddresses<G>& st,
                                             PipelineState<G::kStages>& pipe, int first_row,
                                             int n0, IssueTurns& turns) {
  using cute::SM90::GMMA::ScaleOut;
  constexpr int kN = G::kBlockN;
#pragma unroll
  for (int i = 0; i < G::kAccumulators; ++i) acc[i] = 0.0f;
  float block[G::kAccumulators];
  const int second = warp_uniform(second_weight_group<kN>(n0));
  const uint32_t lane = threadIdx.x % 32, warp = (threadIdx.x / 32) % 4;
  const int row =
      first_row - scale_box_row(first_row) + kSlab * (kBlockM / 2) + 16 * warp + lane / 4;
  const uint32_t row_offset = 4 * row;  // in the scale slot; row + 8 is 32 bytes on
  // Lane c (< kClusterSize) releases the stage in CTA c; the other lanes do not arrive.
  const bool releases = lane < kClusterSize;
  const uint32_t empty_in_cta = cluster_address(st.empty(0), lane % kClusterSize);
  const uint32_t local_releaser = cute::block_rank_in_cluster();  // the lane that frees ours
  const int k_blocks = ceil_div(p.k, kBlockK);
  for (int kb = 0; kb < k_blocks; ++kb) {
    const uint32_t stage = pipe.stage;
    wait_barrier(st.full(stage), pipe.phase);
    const uint32_t slot = st.scale_slot(stage);
    const float a0 = ld_shared_f32(slot + row_offset);
    const float a1 = ld_shared_f32(slot + row_offset + 8 * 4);
    const bool reads_b = lane == local_releaser;
    const float b =
        __shfl_sync(~0u, reads_b ? ld_shared_f32(slot + kBScaleOffset) : 0.0f, local_releaser);
    float b_next = b;
    if constexpr (kN > kWeightBlock)
      b_next = __shfl_sync(~0u, reads_b ? ld_shared_f32(slot + kBScaleOffset + 4) : 0.0f,
                           local_releaser);
    const uint32_t desc_a = st.desc_a<kSlab>(stage), desc_b = st.desc_b(stage);
    fence_accumulators(block);
    turns.wait<kSlab>();
    cute::warpgroup_arrive();
#pragma unroll
    for (int k = 0; k < kBlockK / kWgmmaK; ++k) {
      // +32 bytes of K per step = +2 in the descriptor's address field (smem_descriptor.cuh).
      wgmma_m64k32<kN>(sw128_descriptor_of(desc_a) + 2 * k, sw128_descriptor_of(desc_b) + 2 * k,
                       block, k == 0 ? ScaleOut::Zero : ScaleOut::One,
                       std::make_index_sequence<G::kAccumulators>{});
    }
    cute::warpgroup_commit_batch();
    turns.pass<kSlab>();
    cute::warpgroup_wait<0>();
    fence_accumulators(block);
    const float s0 = a0 * b, s1 = a1 * b;
    const float t0 = a0 * b_next, t1 = a1 * b_next;
    if (releases) arrive_cluster_barrier(empty_in_cta + stage * uint32_t{sizeof(uint64_t)});
    promote_tile<kN>(acc, block, second, s0, s1, t0, t1);
    pipe.advance();
  }
}

}  // namespace moefuse::gemm::fp8
