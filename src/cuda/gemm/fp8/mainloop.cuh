// The FP8 grouped GEMM's mainloop: the TMA producer and the consumer warpgroups that run e4m3
// wgmma per K block and promote each block's result into fp32 registers with its scales.
//
// Pipeline protocol (kStages stages, each with a `full` and an `empty` mbarrier):
//   producer (one thread): wait empty[s] (parity phase ^ 1; a fresh barrier passes), then
//     arrive.expect_tx(full[s], A + B + scale bytes) and three TMA loads: the tile's 128 rows of
//     A for K block kb, the 128 rows of the expert's B for kb, and those 128 rows' activation
//     scales of K group kb (one 512-byte box of the K-major scale tensor). full[s] arrive count 1.
//   consumers (256 threads): wait full[s] (parity phase); read their rows' two activation scales
//     from the stage; 4 wgmma m64n128k32 into a fresh fp32 block accumulator (the first with
//     scale-d 0); commit; wait for all of them (wait_group 0); arrive on empty[s] (count 256);
//     then promote: acc += block · (a_scale[row] · b_scale[n-block, kb]).
// The stage is released before the promotion, so the producer refills it while the FMAs run; the
// two consumer warpgroups interleave, so one's wgmma overlaps the other's promotion (DeepGEMM's
// scheme). Both roles walk the same tiles and K blocks, so their (stage, phase) counters stay in
// lockstep across the persistent loop.
#pragma once

#include <cute/arch/copy_sm90_tma.hpp>
#include <cute/arch/mma_sm90_gmma.hpp>

#include <utility>

#include "cuda/gemm/common/pipeline.cuh"
#include "cuda/gemm/common/smem_descriptor.cuh"
#include "cuda/gemm/common/tile_rows.cuh"
#include "cuda/gemm/common/wgmma.cuh"
#include "cuda/gemm/fp8/config.h"
#include "cuda/gemm/fp8/params.h"
#include "cuda/gemm/fp8/shared.cuh"
#include "cuda/gemm/tile_scheduler.h"

namespace moefuse::gemm::fp8 {

// A through a 2D map over [m_cap, K] (rows past m_cap zero-filled, rows of the next expert
// loaded and masked in the epilogue); B through a 3D map over [E, N, K] (n past N zero-filled,
// never another expert); the scales through a 2D map over [ceil(K/128), fp8_scale_rows(m_cap)].
// K past the end is zero-filled in A and B, so a short last K block adds nothing extra.
__device__ __forceinline__ void produce(const CUtensorMap* tmap_a, const CUtensorMap* tmap_b,
                                        const CUtensorMap* tmap_scales, const Fp8GemmProblem& p,
                                        const SharedLayout& smem, const TileShape& shape,
                                        int total_tiles) {
  const int k_blocks = ceil_div(p.k, kBlockK);
  PipelineState<kStages> pipe;
  for (int t = blockIdx.x; t < total_tiles; t += gridDim.x) {
    const TileCoord c = tile_coord(t, p.offsets, smem.tile_start, p.num_experts, shape);
    const TileRows rows = tile_rows<kBlockM>(p, c);
    for (int kb = 0; kb < k_blocks; ++kb) {
      ClusterBarrier::wait(&smem.empty[pipe.stage], pipe.phase ^ 1u);
      uint64_t* full = &smem.full[pipe.stage];
      ClusterTransactionBarrier::arrive_and_expect_tx(full, kStageBytes);
      cute::SM90_TMA_LOAD_2D::copy(tmap_a, full, kCacheHintNormal, smem.a_stage(pipe.stage),
                                   kb * kBlockK, rows.first);
      cute::SM90_TMA_LOAD_3D::copy(tmap_b, full, kCacheHintNormal, smem.b_stage(pipe.stage),
                                   kb * kBlockK, c.n_block * kBlockN, c.expert);
      cute::SM90_TMA_LOAD_2D::copy(tmap_scales, full, kCacheHintNormal,
                                   smem.scale_stage(pipe.stage), rows.first, kb);
      pipe.advance();
    }
  }
}

// block (=|+)= A_slab · B_stageᵀ over one k32 step: wgmma m64n128k32 e4m3 × e4m3 → f32.
template <size_t... I>
__device__ __forceinline__ void wgmma_m64n128k32(uint64_t desc_a, uint64_t desc_b,
                                                 float (&block)[kAccumulators],
                                                 cute::SM90::GMMA::ScaleOut scale_d,
                                                 std::index_sequence<I...>) {
  using Mma = cute::SM90::GMMA::MMA_64x128x32_F32E4M3E4M3_SS_TN<>;
  Mma::fma(desc_a, desc_b, block[I]..., scale_d);
}

// One tile's K loop for consumer warpgroup `slab` (rows 64·slab .. 64·slab + 63 of the tile).
// b_scale: the tile's row of weight scales, [ceil(K/128)] (expert, n-block fixed).
// Accumulator layout (m64nN f32): acc[4j + 2h + i] is row 16·warp + lane/4 + 8h of the slab,
// column 8j + 2·(lane % 4) + i, so h picks the row and with it the activation scale.
__device__ __forceinline__ void consume_tile(float (&acc)[kAccumulators], const Fp8GemmProblem& p,
                                             const SharedLayout& smem, PipelineState<kStages>& pipe,
                                             int slab, const float* b_scale) {
  using cute::SM90::GMMA::ScaleOut;
#pragma unroll
  for (int i = 0; i < kAccumulators; ++i) acc[i] = 0.0f;
  float block[kAccumulators];
  const int lane = threadIdx.x % 32, warp = (threadIdx.x / 32) % 4;
  const int row = slab * (kBlockM / 2) + 16 * warp + lane / 4;
  const int k_blocks = ceil_div(p.k, kBlockK);
  for (int kb = 0; kb < k_blocks; ++kb) {
    const float sb = __ldg(b_scale + kb);
    ClusterBarrier::wait(&smem.full[pipe.stage], pipe.phase);
    const float* sa = smem.scale_stage(pipe.stage);
    const float s0 = sa[row] * sb, s1 = sa[row + 8] * sb;
    const uint64_t desc_a = smem_descriptor(smem.a_stage(pipe.stage) + slab * (kBlockM / 2) * 128);
    const uint64_t desc_b = smem_descriptor(smem.b_stage(pipe.stage));
    fence_accumulators(block);
    cute::warpgroup_arrive();
#pragma unroll
    for (int k = 0; k < kBlockK / kWgmmaK; ++k) {
      // +32 bytes of K per step = +2 in the descriptor's address field (smem_descriptor).
      wgmma_m64n128k32(desc_a + 2 * k, desc_b + 2 * k, block, k == 0 ? ScaleOut::Zero : ScaleOut::One,
                       std::make_index_sequence<kAccumulators>{});
    }
    cute::warpgroup_commit_batch();
    cute::warpgroup_wait<0>();
    fence_accumulators(block);
    ClusterBarrier::arrive(&smem.empty[pipe.stage]);
#pragma unroll
    for (int j = 0; j < kAccumulators / 4; ++j) {
      acc[4 * j + 0] = fmaf(s0, block[4 * j + 0], acc[4 * j + 0]);
      acc[4 * j + 1] = fmaf(s0, block[4 * j + 1], acc[4 * j + 1]);
      acc[4 * j + 2] = fmaf(s1, block[4 * j + 2], acc[4 * j + 2]);
      acc[4 * j + 3] = fmaf(s1, block[4 * j + 3], acc[4 * j + 3]);
    }
    pipe.advance();
  }
}

}  // namespace moefuse::gemm::fp8
