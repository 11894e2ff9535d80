// Shared pieces of the backward kernels' mainloop: shared-memory layout, wgmma descriptors for
// K-major and MN-major operands, TMA tile loads of either major-ness, and the consumer K loop.
//
// Operand layouts in shared memory (both 128B-swizzled, 1024-byte aligned stage bases):
//   K-major  [rows × 64 K]: row r at r·128 bytes (one TMA box, as the forward kernel).
//   MN-major [K rows × MN]: boxes of 64 MN-contiguous elements × a stage's K rows (kMnChunkBytes
//            each: 8 KiB at 64 rows) back to back; inside a box, K row k at k·128 bytes. wgmma's
//            canonical MN-major SW128 layout ((8,n),(8,k)):((1,LBO),(8,SBO)) in 16-byte units
//            (cute make_gmma_desc<MN>) then has LBO = kMnChunkBytes (next 64-wide MN chunk) and
//            SBO = 1 KiB (next 8 K rows).
// The stage geometry (K rows a stage, stage count) is a template parameter G (config.h Stages).
//
// Pipeline protocol (G::kStages stages, `full` and `empty` mbarriers each), as the forward kernel:
//   producer: wait empty[s] (parity phase ^ 1), arrive.expect_tx(full[s], bytes), TMA loads
//     (or cp.async + cp.async.mbarrier.arrive.noinc for the gathered operand).
//   consumers: wait full[s] (parity phase), [tail fix-up], K/16 wgmma k16, commit; once the
//     previous stage's wgmmas retire (wait_group 1) they release it (common/pipeline.cuh
//     release_stage): every consumer thread on its empty barrier (count 256), or in a cluster of
//     C CTAs (the dgrad, whose peers multicast into this CTA's stages) lane c < C of each
//     consumer warp on the empty barrier of CTA c (count 8 warps × C CTAs; wait_group is
//     .sync.aligned, so the whole warp is past its reads). One wgmma batch stays in flight
//     across stage boundaries.
// Both roles walk the same tiles and K-block counts, so their (stage, phase) stay in lockstep.
#pragma once

#include <cuda.h>
#include <cuda_bf16.h>

#include <cute/arch/copy_sm90_tma.hpp>

#include <utility>

#include "cuda/gemm/backward/config.h"
#include "cuda/gemm/common/handoff_layout.cuh"
#include "cuda/gemm/common/pipeline.cuh"
#include "cuda/gemm/common/smem_descriptor.cuh"
#include "cuda/gemm/common/wgmma.cuh"
#include "cuda/gemm/cluster_scheduler.h"

namespace moefuse::gemm::bwd {

// G::kStages × (A, B) stages, G::kTileBytes of tile buffer (the hand-off's; the gather wgrad's
// sub-tile buffers, slab_tma_store.cuh), the barriers, tile_start[E + 1] (dgrad only).
template <class G>
using StagedLayout = HandoffSharedLayout<G::kStages, G::kABytes, G::kBBytes, G::kTileBytes>;
using SharedLayout = StagedLayout<DgradStages>;  // the dgrad's

template <Major kMajor, class G>
struct OperandDesc;

// K-major (common/smem_descriptor.cuh): K advances 16 elements = 32 bytes inside the row.
template <class G>
struct OperandDesc<Major::K, G> {
  static constexpr uint64_t kStep = 32 >> 4;
  __device__ static uint64_t make(const void* smem) { return smem_descriptor(smem); }
};

// MN-major: LBO = next 64-wide MN chunk, SBO = next 8 K rows; K advances 16 rows = 2 atoms.
template <class G>
struct OperandDesc<Major::MN, G> {
  static constexpr uint64_t kStep = (2 * kSwizzleAtomBytes) >> 4;
  __device__ static uint64_t make(const void* smem) {
    return sw128_descriptor(smem, G::kMnChunkBytes, kSwizzleAtomBytes);
  }
};

// TMA of an MN-major tile: `chunks` boxes of [G::kBlockK K rows × 64 MN], box i from MN
// coordinate mn0 + 64·i, into consecutive kMnChunkBytes slots; 2D map (mn, k) (the dgrad's 3D
// B map, (mn, k, expert), loads its boxes itself: some of them by multicast).
template <class G>
__device__ __forceinline__ void tma_mn_major_2d(const CUtensorMap* map, uint64_t* full,
                                                uint8_t* dst, int chunks, int mn0, int k0) {
  for (int i = 0; i < chunks; ++i)
    cute::SM90_TMA_LOAD_2D::copy(map, full, kCacheHintNormal, dst + i * G::kMnChunkBytes,
                                 mn0 + i * kMnChunk, k0);
}

// Consumer warpgroup `slab`'s A slab (rows 64·slab .. 64·slab + 63 of the tile) in a stage.
template <Major kA, class G>
__device__ __forceinline__ const uint8_t* a_slab(const uint8_t* a_stage, int slab) {
  // K-major: 64 rows × 128 B; MN-major: exactly one 64-wide chunk (config.h static_assert).
  return a_stage + slab * (kA == Major::K ? (kBlockM / 2) * 128 : G::kMnChunkBytes);
}

// wgmma K steps of a K block: 4 in every ring (64 rows of K).
template <class G>
inline constexpr int kKSteps = G::kBlockK / kWgmmaK;

// acc += the first kSteps K steps (16 rows each) of a stage's A slab and B, one batch.
template <Major kA, Major kB, class G, int kSteps>
__device__ __forceinline__ void wgmma_k_steps(uint64_t desc_a, uint64_t desc_b,
                                              float (&acc)[G::kN / 2]) {
  cute::warpgroup_arrive();
#pragma unroll
  for (int k = 0; k < kSteps; ++k)
    wgmma_m64k16<G::kN, kA, kB>(desc_a + OperandDesc<kA, G>::kStep * k,
                                desc_b + OperandDesc<kB, G>::kStep * k, acc,
                                std::make_index_sequence<G::kN / 2>{});
  cute::warpgroup_commit_batch();
}

// One tile's K loop for consumer warpgroup `slab`. `prepare(stage, kb)` runs after the stage's
// full barrier, before its wgmmas (tail zeroing, proxy fences); it must be uniform per warpgroup.
// The last K block runs its first last_steps K steps only (1 to kKSteps: the wgrad's ragged K,
// whose last block holds an expert's last rows).
template <Major kA, Major kB, class G, int kCluster = 1, class Prepare>
__device__ __forceinline__ void consume_tile(float (&acc)[G::kN / 2], int k_blocks,
                                             const StagedLayout<G>& smem,
                                             PipelineState<G::kStages>& pipe, int slab,
                                             Prepare&& prepare, int last_steps = kKSteps<G>) {
  static_assert(kKSteps<G> == 4, "the K steps' dispatch below");
#pragma unroll
  for (int i = 0; i < G::kN / 2; ++i) acc[i] = 0.0f;
  fence_accumulators(acc);
  int previous_stage = -1;
  for (int kb = 0; kb < k_blocks; ++kb) {
    ClusterBarrier::wait(&smem.full[pipe.stage], pipe.phase);
    prepare(pipe.stage, kb);
    const uint64_t desc_a =
        OperandDesc<kA, G>::make(a_slab<kA, G>(smem.a_stage(pipe.stage), slab));
    const uint64_t desc_b = OperandDesc<kB, G>::make(smem.b_stage(pipe.stage));
    // Whole blocks as one straight run of wgmmas; a partial last block picks its run (K steps
    // under a per-step condition made ptxas fence every wgmma of every block).
    const int steps = kb == k_blocks - 1 ? last_steps : kKSteps<G>;
    if (steps == 4) wgmma_k_steps<kA, kB, G, 4>(desc_a, desc_b, acc);
    else if (steps == 3) wgmma_k_steps<kA, kB, G, 3>(desc_a, desc_b, acc);
    else if (steps == 2) wgmma_k_steps<kA, kB, G, 2>(desc_a, desc_b, acc);
    else wgmma_k_steps<kA, kB, G, 1>(desc_a, desc_b, acc);
    cute::warpgroup_wait<1>();
    fence_accumulators(acc);
    if (previous_stage >= 0) release_stage<kCluster>(&smem.empty[previous_stage]);
    previous_stage = pipe.stage;
    pipe.advance();
  }
  cute::warpgroup_wait<0>();
  fence_accumulators(acc);
  if (previous_stage >= 0) release_stage<kCluster>(&smem.empty[previous_stage]);
}

// Accumulator position of thread `t` (of its warpgroup): acc[4j + 2h + i] is row
// 16·warp + lane/4 + 8h, column 8j + 2·(lane % 4) + i of the 64 × 256 slab.
struct AccPosition {
  int row;  // of h = 0 within the slab
  int col;  // of j = 0, i = 0
  __device__ static AccPosition of_thread() {
    const int lane = threadIdx.x % 32, warp = (threadIdx.x / 32) % 4;
    return AccPosition{.row = 16 * warp + lane / 4, .col = 2 * (lane % 4)};
  }
};

}  // namespace moefuse::gemm::bwd
