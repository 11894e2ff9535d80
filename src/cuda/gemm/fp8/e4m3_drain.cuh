// The FP8 kernel's E4M3 output: the epilogue warps turn a staged tile into D's E4M3 codes and
// 1x128 scales (the DeepSeek recipe's activation layout: codes [M_cap, N_out], scales K-major
// [ceil(N_out/128), fp8_scale_rows(M_cap)]), the operand FC2 reads, so that FC1's act is never
// written in bf16 and quantised by a second pass.
//
// Contract: the codes and scales are exactly moefuse::quantize_fp8_blockwise_1x128 of the bf16 D
// the same call would write (activation and row scale applied to the staged bf16(h + bias), each
// output rounded to bf16: drain_staged_tile.cuh's activate_glu8 / activate8), its scales
// transposed. The arithmetic is the GPU quantisers' (formats::blockwise_scale, the hardware E4M3
// conversion of quant/vec16.cuh), called, not copied.
//
// A scale group is 128 columns of a row of D.
// - Without a GLU, a tile's 128 h columns are D's columns of one group: one pass, 16 lanes a row
//   (8 columns each) reduce the amax by shuffles and quantise.
// - With a GLU, a tile gives 64 outputs a row, half a group; its other half comes from n-block
//   2j + 1 when this is 2j. The kernel then forms units of n-pairs only (UnitPairs::kNGroupsOnly:
//   CTA rank r of the cluster computes n-block 2j + r of the same m-block, at the same time), and
//   the two CTAs' epilogue warps exchange each row's amax through distributed shared memory:
//     pass 1, item (row, 8 outputs): act = activate_glu8 (+ the pre-activation store), written
//       in place over the gate chunk it came from; the row's 8 lanes reduce |act| by shuffles
//       and the first stores it to amax_own[row] and, by st.async, to the partner's
//       amax_peer[b][row], completing 4 transaction bytes on the partner's amax_full[b]; one
//       thread arrives on its own amax_full[b] expecting the partner's 512 bytes (128 rows);
//       named barrier over the epilogue threads;
//     every thread waits on amax_full[b]: the phase completes once the own arrive and all 512
//       bytes are in (st.async's bytes are visible to whoever observes the phase, as a TMA
//       load's are);
//     pass 2, item (row, 16 outputs): amax = max(own, peer), scale = blockwise_scale(amax), 16
//       codes in one 16-byte store; rank 0 (n-block 2j) stores the row's scale of group j; then
//       every thread arrives on the partner's amax_empty[b] (its amax_peer[b] may be rewritten;
//       the reads are done, as with the mainloop's stage releases).
//   Before writing the partner's amax_peer[b], a thread waits on its own amax_empty[b] for the
//   partner's reads of the previous use of that buffer (parity ((uses of b) & 1) ^ 1: a fresh
//   barrier passes). A partner's bytes may complete on our amax_full[b] before our own
//   expect_tx: the count goes negative for a moment and the phase cannot complete before our
//   arrive; they cannot reach the previous phase, which completed before we released the buffer
//   the partner waited for. b = the exchange count & 1: both CTAs walk the same units and
//   exchange on the same ones (a phantom partner: none, the live CTA's own amax is the group's,
//   the group being the last and short). amax_own needs one buffer: the next tile's pass 1
//   starts after that tile's hand-off, which follows every epilogue thread's release of this
//   one.
//   Nobody is lapped: a CTA's epilogue can be at most one exchange ahead of its partner's (use
//   i + 2 of buffer b needs the partner's reads of use i), so two buffers suffice; every remote
//   write and arrive precedes the kernel's final cluster barrier.
//   Run 27 (call 3) had the first version's release/acquire arrives at cluster scope in every
//   thread: each compiled to MEMBAR.ALL.GPU, which waited for the thread's pre stores, and qwen3's
//   consumers spent 16.5% of their samples waiting for the tile buffer.
// Rows at or past the expert's end and columns at or past N are neither stored nor counted in an
// amax (their lanes reduce zeros: every lane of a warp reaches the shuffles).
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

#include "cuda/gemm/common/pipeline.cuh"
#include "cuda/gemm/common/tile_rows.cuh"
#include "cuda/gemm/epilogues/drain_staged_tile.cuh"
#include "cuda/gemm/epilogues/staged_tile.cuh"
#include "cuda/gemm/fp8/config.h"
#include "cuda/gemm/fp8/params.h"
#include "cuda/gemm/fp8/shared.cuh"
#include "cuda/quant/vec16.cuh"
#include "formats/recipes.h"

namespace moefuse::gemm::fp8 {

namespace q = cuda::quant;

// The named barrier between the two passes (IssueTurns, the consumers', uses 1 and 2).
inline constexpr int kE4m3DrainBarrier = 3;

// v into the partner's shared memory at `remote`, completing 4 transaction bytes on its barrier
// `remote_barrier` (both shared::cluster addresses).
__device__ __forceinline__ void st_async_f32(uint32_t remote, float v, uint32_t remote_barrier) {
  asm volatile("st.async.shared::cluster.mbarrier::complete_tx::bytes.f32 [%0], %1, [%2];"
               :
               : "r"(remote), "f"(v), "r"(remote_barrier)
               : "memory");
}

// One epilogue thread's state across the tiles it drains; kWorkers epilogue threads (96, or 224
// with a fourth warpgroup: config.h, Roles), worker in [0, kWorkers).
template <int kWorkers>
class E4m3Drain {
  static_assert(kWorkers % 32 == 0, "whole warps: every warp walks its items in step");
  static constexpr int kPitch = Tile128::kTilePitch;  // the staged tile's rows (config.h)

 public:
  __device__ E4m3Drain(const SharedLayout& smem, int rank, int worker)
      : amax_own_(smem.amax_own), amax_peer_(smem.amax_peer), smem_amax_full_(smem.amax_full),
        worker_(worker) {
    const uint32_t peer = static_cast<uint32_t>(rank ^ 1);
    own_full_ = shared_address(smem.amax_full);
    own_empty_ = shared_address(smem.amax_empty);
    peer_full_ = cluster_address(own_full_, peer);
    peer_empty_ = cluster_address(own_empty_, peer);
    peer_amax_ = cluster_address(shared_address(smem.amax_peer), peer);
  }

  // The staged tile (rows, n-block n_block) to D's codes and scales. peer_live: the partner CTA
  // computes n-block n_block ^ 1 of the same rows (GLU only).
  template <EpilogueOp kOp>
  __device__ void drain(uint8_t* tile, const Fp8GemmProblem& p, const EpilogueParams& ep,
                        const TileRows& rows, int n_block, bool peer_live) {
    assume_shared(tile);
    if constexpr (is_glu_op(kOp)) drain_glu<kOp>(tile, p, ep, rows, n_block, peer_live);
    else drain_plain<kOp>(tile, p, ep, rows, n_block);
  }

 private:
  // D row `row`'s scale of group `group`.
  __device__ static float* scale_at(const Fp8GemmProblem& p, int group, int row) {
    const int64_t pitch = (int64_t{p.m_cap} + 3) / 4 * 4;  // fp8_scale_rows
    return p.d_scales + group * pitch + row;
  }

  // No GLU: the tile's 128 columns are one group; 16 lanes a row, 8 columns each.
  template <EpilogueOp kOp>
  __device__ void drain_plain(const uint8_t* tile, const Fp8GemmProblem& p,
                              const EpilogueParams& ep, const TileRows& rows, int n_block) {
    constexpr int kChunks = kBlockN / 8;
    static_assert(kWorkers % kChunks == 0, "a row's lanes are one aligned group");
    // The linear epilogue without pre stages final values (epilogues/staged_tile.cuh).
    const bool staged_final = copies_staged_tile(ep);
    const int n0 = n_block * kBlockN;
    auto* d = static_cast<uint8_t*>(p.d);
    for (int item = worker_; item < kBlockM * kChunks; item += kWorkers) {
      const int r = item / kChunks, c = item % kChunks;
      const int row = rows.first + r, col = n0 + 8 * c;
      const bool valid = row < rows.end && col < p.n;
      uint4 v = make_uint4(0, 0, 0, 0);
      if (valid) {
        const uint4 staged = *reinterpret_cast<const uint4*>(tile + r * kPitch + c * 16);
        if (ep.pre) *reinterpret_cast<uint4*>(ep.pre + int64_t{row} * p.n + col) = staged;
        v = staged_final ? staged : activate8<kOp>(ep, staged, row_scale_of(ep, row));
      }
      const q::Raw16<__nv_bfloat16> raw = q::raw16_of(v);
      const float amax = q::group_max<kChunks>(q::amax16(raw));
      if (!valid) continue;
      const formats::BlockwiseScale s = formats::blockwise_scale(amax);
      q::store8_e4m3(d + int64_t{row} * p.n_out + col, raw, s.multiplier);
      if (c == 0) *scale_at(p, n_block, row) = s.scale;
    }
  }

  // act is parked in the tile buffer, which the epilogue warps own until they release it.
  template <EpilogueOp kOp>
  __device__ void drain_glu(uint8_t* tile, const Fp8GemmProblem& p, const EpilogueParams& ep,
                            const TileRows& rows, int n_block, bool peer_live) {
    constexpr int kPairs = kBlockN / 16;  // 8 outputs from a gate chunk and an up chunk
    static_assert(kWorkers % kPairs == 0, "a row's lanes are one aligned group");
    const int n0 = n_block * kBlockN;
    const int b = exchanges_ & 1;
    const uint32_t use = static_cast<uint32_t>(exchanges_ >> 1);
    float* own = amax_own_;
    const float* peer = amax_peer_ + b * kBlockM;
    if (peer_live) {
      wait_barrier(own_empty_ + b * 8, (use & 1u) ^ 1u);
      if (worker_ == 0)
        ClusterTransactionBarrier::arrive_and_expect_tx(smem_amax_full_ + b, kBlockM * 4);
    }

    for (int item = worker_; item < kBlockM * kPairs; item += kWorkers) {
      const int r = item / kPairs, q = item % kPairs;
      const int row = rows.first + r;
      const bool valid = row < rows.end && n0 + 16 * q < p.n;
      uint4 act = make_uint4(0, 0, 0, 0);
      if (valid) {
        uint4* chunk = reinterpret_cast<uint4*>(tile + r * kPitch + q * 32);
        const uint4 gate = chunk[0], up = chunk[1];
        if (ep.pre) {
          uint4* pre = reinterpret_cast<uint4*>(ep.pre + int64_t{row} * p.n + n0 + 16 * q);
          pre[0] = gate;
          pre[1] = up;
        }
        act = activate_glu8<kOp>(ep, gate, up, row_scale_of(ep, row));
        chunk[0] = act;
      }
      const float amax = q::group_max<kPairs>(q::amax16(q::raw16_of(act)));
      if (q != 0) continue;
      own[r] = amax;
      if (peer_live) st_async_f32(peer_amax_ + (b * kBlockM + r) * 4, amax, peer_full_ + b * 8);
    }
    asm volatile("bar.sync %0, %1;" ::"n"(kE4m3DrainBarrier), "n"(kWorkers) : "memory");
    if (peer_live) wait_barrier(own_full_ + b * 8, use & 1u);

    // Pass 2: 16 outputs (act chunks 2c, 2c + 1) an item.
    constexpr int kChunks = kPairs / 2;
    auto* d = static_cast<uint8_t*>(p.d);
    for (int item = worker_; item < kBlockM * kChunks; item += kWorkers) {
      const int r = item / kChunks, c = item % kChunks;
      const int row = rows.first + r, col = n0 / 2 + 16 * c;
      if (row >= rows.end || col >= p.n_out) continue;
      const float amax = peer_live ? fmaxf(own[r], peer[r]) : own[r];
      const formats::BlockwiseScale s = formats::blockwise_scale(amax);
      const uint4* chunk = reinterpret_cast<const uint4*>(tile + r * kPitch + c * 64);
      // act of pairs 2c and 2c + 1
      q::store16_e4m3(d + int64_t{row} * p.n_out + col, q::raw16_of(chunk[0], chunk[2]),
                      s.multiplier);
      if (c == 0 && n_block % 2 == 0) *scale_at(p, n_block / 2, row) = s.scale;
    }
    if (peer_live) {
      arrive_cluster_barrier(peer_empty_ + b * 8);
      ++exchanges_;
    }
  }

  float* amax_own_;         // [kBlockM]
  const float* amax_peer_;  // [kAmaxBuffers][kBlockM]
  uint64_t* smem_amax_full_;
  int worker_;
  int exchanges_ = 0;  // amax exchanges with the partner (amax_peer's buffer and the phases)
  uint32_t own_full_, own_empty_, peer_full_, peer_empty_, peer_amax_;
};

}  // namespace moefuse::gemm::fp8
