// The grouped GEMM's mainloop: the producer warp that fills the shared-memory stages and the
// consumer warpgroups that run wgmma over them.
//
// Pipeline protocol (kStages stages, each with a `full` mbarrier, arrive count 1 plus the
// transaction bytes, and an `empty` mbarrier, arrive count 256):
//   producer (warp 0 of warpgroup 0): wait empty[s] (parity phase ^ 1; a fresh barrier passes),
//     then ONE arrive.expect_tx(full[s], bytes) followed by the TMA loads whose complete_tx sum to
//     exactly `bytes`:
//     plain variant:  thread 0 alone; bytes = A box (128 rows) + B box = kABytes + kBBytes.
//     gather variant: all 32 lanes; lane l owns stage rows l + 32j (j < 4) of the tile and loads
//                     each row whose source token is valid with a 1-row TMA box of x; the other
//                     rows (past the expert's end, index outside [0, T)) are zeroed with st.shared
//                     and fenced to the async proxy BEFORE the arrive (__syncwarp orders them);
//                     lane 0 arrives with bytes = loaded_rows · 128 + kBBytes, where loaded_rows
//                     is the warp's ballot count of valid rows for this tile (fixed for the tile,
//                     computed once from gather_index), then lanes issue their row loads (a second
//                     __syncwarp puts the expect_tx before any of their complete_tx).
//     Every TMA box delivers its full size, zero-filled where it leaves the tensor (K tail, N
//     tail, rows past m_cap), so those bytes are in the count too. A phase completes once
//     the producer has arrived AND every counted byte has landed, in either order.
//   consumers: wait full[s] (parity phase), issue 4 wgmma (K = 64), commit; once the *previous*
//     stage's wgmmas retire (wait_group 1) every consumer thread arrives on that stage's empty
//     barrier (arrive count 256). One wgmma batch stays in flight across stage boundaries.
// Both roles walk the same tiles and the same number of K blocks per tile, so their (stage,
// phase) counters stay in lockstep across the persistent loop; kernel.cuh walks the whole
// protocol, tile hand-off included, for 0, 1 and 2 tiles per CTA.
#pragma once

#include <cuda_bf16.h>

#include <cute/arch/copy_sm90_tma.hpp>

#include <utility>

#include "cuda/gemm/common/handoff_layout.cuh"
#include "cuda/gemm/common/pipeline.cuh"
#include "cuda/gemm/common/smem_descriptor.cuh"
#include "cuda/gemm/common/tile_rows.cuh"
#include "cuda/gemm/common/wgmma.cuh"
#include "cuda/gemm/config.h"
#include "cuda/gemm/params.h"

namespace moefuse::gemm {

// A and B stages (kStages × [kBlockM or kBlockN rows × 128 B], 128B-swizzled) and the epilogue's
// staging region (kTileStageBytes): the overlapped epilogue's tile buffer, or the fp32 variant's
// per-warpgroup staging buffers.
using SharedLayout = HandoffSharedLayout<kStages, kABytes, kBBytes, kTileStageBytes>;

// TMA producer: one thread. A through a 2D map over [m_cap, K] (rows past m_cap zero-filled,
// rows of the next expert loaded and masked in the epilogue); B through a 3D map over
// [E, N, K] with the expert as the outer coordinate (n past N zero-filled, never another expert).
__device__ __forceinline__ void produce_tma(const CUtensorMap* tmap_a, const CUtensorMap* tmap_b,
                                            const GemmProblem& p, const SharedLayout& smem,
                                            const TileShape& shape, int total_tiles) {
  const int k_blocks = ceil_div(p.k, kBlockK);
  PipelineState<kStages> pipe;
  for (int t = blockIdx.x; t < total_tiles; t += gridDim.x) {
    const TileCoord c = tile_coord(t, p.offsets, smem.tile_start, p.num_experts, shape);
    const TileRows rows = tile_rows<kBlockM>(p, c);
    for (int kb = 0; kb < k_blocks; ++kb) {
      ClusterBarrier::wait(&smem.empty[pipe.stage], pipe.phase ^ 1u);
      uint64_t* full = &smem.full[pipe.stage];
      ClusterTransactionBarrier::arrive_and_expect_tx(full, kABytes + kBBytes);
      cute::SM90_TMA_LOAD_2D::copy(tmap_a, full, kCacheHintNormal, smem.a_stage(pipe.stage),
                                   kb * kBlockK, rows.first);
      cute::SM90_TMA_LOAD_3D::copy(tmap_b, full, kCacheHintNormal, smem.b_stage(pipe.stage),
                                   kb * kBlockK, c.n_block * kBlockN, c.expert);
      pipe.advance();
    }
  }
}

// Gather producer: warp 0 of warpgroup 0 (all 32 lanes). Stage row r of the tile is x[token]
// with token = gather_index[first + r], loaded by one TMA box of 1 row × 64 columns (128 bytes)
// through a 2D map over x [T, K] with the 128B swizzle, written at stage offset r · 128.
//
// Why 128 one-row boxes give the layout of one 128-row box: the 128B swizzle is a function of the
// shared-memory address, not of the box: the 16-byte chunk index (address bits 4-6) is XORed with
// bits 7-9 (the row within the 1024-byte atom). CuTe models it that way: the SW128 atom is
// Swizzle<3, 4, 3> (cute/swizzle.hpp: yyy_msk = bits 7-9 XORed into bits 4-6) of the smem byte
// index, and make_tma_copy_desc (cute/atom/copy_traits_sm90_tma.hpp) takes it as the "Swizzle fn
// on smem_idx". The PTX ISA says the same for the readers: a matrix descriptor's repeating
// pattern starts at 1024-byte address boundaries for the 128B swizzle, and a start address off
// such a boundary needs a non-zero "base offset" ((addr >> 7) & 7; the wgmma descriptor's bits
// 49-51, tabulated in the tcgen05 "Shared Memory Descriptor" section). Stage bases are
// 1024-aligned (common/handoff_layout.cuh), so row r's box at r · 128 lands exactly where row r
// of a 128-row box would; each destination is 128-byte aligned, the tensor-copy minimum in the CUDA programming
// guide's TMA alignment table. (One third-party reading of the PTX "swizzling modes" section asks
// for 1024-byte-aligned destinations, NVIDIA/Fuser PR 4096: if gather results are wrong and the
// plain path right, suspect this first.)
//
// Rows without a token are zeroed instead of loaded (see the protocol above). The set of such
// rows is fixed for the tile and this tile's loads never write them, so each stage buffer needs
// the zeros only the first time the tile uses it: k blocks 0 .. kStages - 1.
__device__ __forceinline__ void produce_gather(const CUtensorMap* tmap_x, const CUtensorMap* tmap_b,
                                               const GemmProblem& p, const SharedLayout& smem,
                                               const TileShape& shape, int total_tiles) {
  constexpr int kRowBytes = kBlockK * 2;
  constexpr int kRowsPerLane = kBlockM / 32;
  const int lane = threadIdx.x % 32;
  const int k_blocks = ceil_div(p.k, kBlockK);
  PipelineState<kStages> pipe;
  for (int t = blockIdx.x; t < total_tiles; t += gridDim.x) {
    const TileCoord c = tile_coord(t, p.offsets, smem.tile_start, p.num_experts, shape);
    const TileRows rows = tile_rows<kBlockM>(p, c);
    // The source token of each of this lane's rows (-1: zeros), and how many rows the warp loads.
    int token[kRowsPerLane];
    int loaded_rows = 0;
#pragma unroll
    for (int j = 0; j < kRowsPerLane; ++j) {
      const int r = rows.first + lane + 32 * j;
      const int tok = r < rows.end ? __ldg(p.gather_index + r) : -1;
      token[j] = (tok >= 0 && tok < p.gather_rows) ? tok : -1;
      loaded_rows += __popc(__ballot_sync(0xffffffffu, token[j] >= 0));
    }
    const bool has_zero_rows = loaded_rows < kBlockM;
    const uint32_t tx_bytes = static_cast<uint32_t>(loaded_rows * kRowBytes + kBBytes);
    for (int kb = 0; kb < k_blocks; ++kb) {
      ClusterBarrier::wait(&smem.empty[pipe.stage], pipe.phase ^ 1u);
      uint64_t* full = &smem.full[pipe.stage];
      uint8_t* a_stage = smem.a_stage(pipe.stage);
      if (has_zero_rows && kb < kStages) {
#pragma unroll
        for (int j = 0; j < kRowsPerLane; ++j) {
          if (token[j] >= 0) continue;
          const uint32_t row = static_cast<uint32_t>(__cvta_generic_to_shared(a_stage)) +
                               (lane + 32 * j) * kRowBytes;
#pragma unroll
          for (int q = 0; q < kRowBytes / 16; ++q)
            asm volatile("st.shared.v4.u32 [%0], {%1, %1, %1, %1};\n" ::"r"(row + 16 * q), "r"(0)
                         : "memory");
        }
        // Generic-proxy writes that wgmma (async proxy) will read.
        cutlass::arch::fence_view_async_shared();
      }
      __syncwarp();  // zeros written and fenced before the arrive that can complete the phase
      if (lane == 0) {
        ClusterTransactionBarrier::arrive_and_expect_tx(full, tx_bytes);
        cute::SM90_TMA_LOAD_3D::copy(tmap_b, full, kCacheHintNormal, smem.b_stage(pipe.stage),
                                     kb * kBlockK, c.n_block * kBlockN, c.expert);
      }
      __syncwarp();  // the expect_tx before any row's complete_tx
#pragma unroll
      for (int j = 0; j < kRowsPerLane; ++j) {
        if (token[j] < 0) continue;
        cute::SM90_TMA_LOAD_2D::copy(tmap_x, full, kCacheHintNormal,
                                     a_stage + (lane + 32 * j) * kRowBytes, kb * kBlockK,
                                     token[j]);
      }
      pipe.advance();
    }
  }
}

// One tile's K loop for consumer warpgroup `slab` (0 or 1: rows 64·slab .. 64·slab + 63).
__device__ __forceinline__ void consume_tile(float (&acc)[128], const GemmProblem& p,
                                             const SharedLayout& smem, PipelineState<kStages>& pipe,
                                             int slab) {
#pragma unroll
  for (int i = 0; i < 128; ++i) acc[i] = 0.0f;
  fence_accumulators(acc);
  const int k_blocks = ceil_div(p.k, kBlockK);
  int previous_stage = -1;
  for (int kb = 0; kb < k_blocks; ++kb) {
    ClusterBarrier::wait(&smem.full[pipe.stage], pipe.phase);
    const uint64_t desc_a = smem_descriptor(smem.a_stage(pipe.stage) + slab * (kBlockM / 2) * 128);
    const uint64_t desc_b = smem_descriptor(smem.b_stage(pipe.stage));
    cute::warpgroup_arrive();
#pragma unroll
    for (int k = 0; k < kBlockK / kWgmmaK; ++k) {
      // +32 bytes of K per step = +2 in the descriptor's address field (smem_descriptor).
      wgmma_m64n256k16<Major::K, Major::K>(desc_a + 2 * k, desc_b + 2 * k, acc,
                                           std::make_index_sequence<128>{});
    }
    cute::warpgroup_commit_batch();
    cute::warpgroup_wait<1>();
    fence_accumulators(acc);
    if (previous_stage >= 0) ClusterBarrier::arrive(&smem.empty[previous_stage]);
    previous_stage = pipe.stage;
    pipe.advance();
  }
  cute::warpgroup_wait<0>();
  fence_accumulators(acc);
  ClusterBarrier::arrive(&smem.empty[previous_stage]);
}

}  // namespace moefuse::gemm
