// The FP8 consumers' turns at the tensor cores: the two consumer warpgroups issue their K blocks'
// wgmma alternately, so that one's promotion overlaps the other's wgmma.
//
// Run 9 (ncu source counters, bench/results/2026-11-29_h200_run9_ncu_fp8_gemm.txt and
// docs/fp8.md): each K block a consumer warp runs ~170 instructions (descriptors, 4 wgmma, wait,
// 64 promotion FMAs) and spent only 27% of its time waiting for its wgmma. Both warpgroups wait
// on the same full barrier, their wgmma interleave and finish together, and then both promote
// while the tensor cores idle: 54% SM throughput. In turns, warpgroup 0's K block b, then
// warpgroup 1's, then warpgroup 0's b + 1 (issued once its promotion of b is done), ... keep a
// wgmma queued behind the one running while the other warpgroup promotes.
//
// Two named barriers of 256 threads (ids 1, 2; 0 is __syncthreads): turn[w] completes when
// warpgroup w may issue — warpgroup 1 waits (bar.sync) on turn[1] before every K block and
// warpgroup 0 arrives on it (bar.arrive) after issuing its own; turn[0] the other way round,
// except that warpgroup 0's first K block waits for nothing. Arrivals never run ahead by more
// than one phase: a warpgroup arrives on the other's barrier once per K block and waits on its
// own before the next. Both warpgroups walk the same tiles with the same K blocks, so after the
// last one warpgroup 1's final arrival on turn[0] is pending: finish() lets warpgroup 0 take it,
// leaving no barrier half-arrived at exit. Phantom tiles issue nothing and take no turn.
#pragma once

namespace moefuse::gemm::fp8 {

class IssueTurns {
 public:
  __device__ explicit IssueTurns(int slab) : slab_(slab) {}

  // Before the K block's first wgmma. kSlab: the calling warpgroup's slab (the K loop is
  // instantiated per slab), so the barrier ids are immediates, not recomputed in every K block.
  template <int kSlab>
  __device__ void wait() {
    if (kSlab == 1 || took_turn_) sync(kTurn + kSlab);
    took_turn_ = true;
  }
  // After the K block's wgmma are committed (before waiting for them).
  template <int kSlab>
  __device__ void pass() const {
    arrive(kTurn + (kSlab ^ 1));
  }
  // After the last tile.
  __device__ void finish() const {
    if (slab_ == 0 && took_turn_) sync(kTurn);
  }

 private:
  static constexpr int kTurn = 1;      // named barriers kTurn (warpgroup 0's), kTurn + 1
  static constexpr int kThreads = 256;  // both consumer warpgroups
  __device__ static void sync(int id) {
    asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(kThreads) : "memory");
  }
  __device__ static void arrive(int id) {
    asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(kThreads) : "memory");
  }

  int slab_;
  bool took_turn_ = false;
};

}  // namespace moefuse::gemm::fp8
