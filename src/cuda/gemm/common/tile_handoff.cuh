// The epilogue hand-off of the kernels with the overlapped epilogue (forward with bf16 output,
// dgrad, TMA wgrad): the consumer warpgroups write a finished tile (or a part of one) into the
// shared tile buffer and go straight back to the mainloop; the epilogue warps (warps 1-3 of
// warpgroup 0, 96 threads) drain it to global memory while the tensor cores work on the next
// tile. What goes into the buffer, and how, is each kernel's epilogue's business.
//
// Protocol (two mbarriers; every thread of a side keeps its own phase bit, starting at 0):
//   consumers (256 threads), per hand-off:  acquire = wait tile_empty (parity phase ^ 1: a fresh
//     barrier passes), write the buffer, publish = arrive tile_full (count 256), phase ^= 1.
//   epilogue warps (96 threads), per hand-off:  wait_full = wait tile_full (parity phase), drain
//     the buffer, release = arrive tile_empty (count: the epilogue threads, 96 or 224), phase ^= 1.
// The arrive (release) / wait (acquire) pairs order the buffer's writes and reads; no named
// barrier is involved. Both sides walk the same tiles with the same number of hand-offs per
// tile, so each waiter waits on every phase in order and can never be lapped (a parity wait
// would then pass spuriously).
//
// Walked by hand (u = tile_full's completed phases, v = tile_empty's):
//   0 tiles: neither side enters its loop; nothing waits.
//   1 hand-off: consumers pass empty(parity 1) on the fresh barrier, write, arrive: u = 1.
//     Epilogue waits full(parity 0): passes once u = 1; drains; arrives: v = 1. The consumers may
//     already have left the kernel; the buffer lives until the whole CTA exits. Nobody waits on
//     tile_empty's completed phase, which is harmless.
//   2 hand-offs: consumers' second wait is empty(parity 0): blocks until v = 1 (the first one
//     drained); write, arrive: u = 2. Epilogue waits full(parity 1): passes at u = 2; v = 2.
//     A consumer cannot arrive twice within one phase of tile_full: its next arrive needs the
//     epilogue's release of the buffer, which needs the phase to have completed.
#pragma once

#include <cstdint>

#include "cuda/gemm/common/pipeline.cuh"
#include "cuda/gemm/common/warp_roles.h"

namespace moefuse::gemm {

// One side's view of the hand-off: the buffer, the two barriers and this thread's phase bit.
struct TileHandoff {
  uint8_t* tile;
  uint64_t* full;
  uint64_t* empty;
  uint32_t phase = 0;

  // Layout: a shared-memory layout with the buffer and its two barriers (HandoffSharedLayout).
  template <class Layout>
  __device__ static TileHandoff of(const Layout& smem) {
    return TileHandoff{.tile = smem.tile, .full = smem.tile_full, .empty = smem.tile_empty};
  }
  // By one thread, before the CTA-wide __syncthreads (and before fence_barrier_init).
  __device__ static void init_barriers(uint64_t* full, uint64_t* empty,
                                       int epilogue_threads = kEpilogueThreads) {
    ClusterBarrier::init(full, kConsumerThreads);
    ClusterBarrier::init(empty, epilogue_threads);
  }

  // Consumer side.
  __device__ void acquire() const { ClusterBarrier::wait(empty, phase ^ 1u); }
  __device__ void publish() {
    ClusterBarrier::arrive(full);
    phase ^= 1u;
  }
  // Epilogue side.
  __device__ void wait_full() const { ClusterBarrier::wait(full, phase); }
  __device__ void release() {
    ClusterBarrier::arrive(empty);
    phase ^= 1u;
  }
};

}  // namespace moefuse::gemm
