// The warp roles every persistent GEMM kernel uses (forward, backward, FP8): warpgroup 0 produces
// (and in the kernels with the overlapped epilogue, its warps 1-3 are the epilogue warps),
// warpgroups 1 and 2 consume, each owning 64 rows (one wgmma m64 slab) of the 128-row tile. The
// setmaxnreg budgets themselves are per kernel (its config.h); the rule they obey is here.
#pragma once

namespace moefuse::gemm {

inline constexpr int kWarpgroupThreads = 128;
inline constexpr int kConsumerWarpgroups = 2;
inline constexpr int kThreads = kWarpgroupThreads * (1 + kConsumerWarpgroups);
inline constexpr int kConsumerThreads = kWarpgroupThreads * kConsumerWarpgroups;
inline constexpr int kEpilogueWarps = 3;  // warps 1-3 of warpgroup 0
inline constexpr int kEpilogueThreads = kEpilogueWarps * 32;

// __launch_bounds__(threads, 1) gives each thread 65536 / threads registers, rounded down to the
// allocation unit of 8: 168 for kThreads, 128 for 512. setmaxnreg only moves registers between
// the warpgroups of the CTA, so (threads - 256) × producer + 256 × consumer must not exceed what
// the CTA holds (the non-consumer warpgroups all take the producer budget).
constexpr int launch_registers(int threads) { return 65536 / threads / 8 * 8; }
constexpr bool fits_register_file(int producer_regs, int consumer_regs, int threads = kThreads) {
  return producer_regs * (threads - kConsumerThreads) + consumer_regs * kConsumerThreads <=
         launch_registers(threads) * threads;
}

}  // namespace moefuse::gemm
