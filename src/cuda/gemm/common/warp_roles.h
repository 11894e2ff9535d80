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

// __launch_bounds__(kThreads, 1) gives each thread 168 registers (65536 / 384, rounded down to
// the allocation unit of 8). setmaxnreg only moves registers between the warpgroups of the CTA,
// so 128 × producer + 256 × consumer must not exceed the 168 × 384 the CTA holds.
inline constexpr int kLaunchRegs = 168;
constexpr bool fits_register_file(int producer_regs, int consumer_regs) {
  return producer_regs * kWarpgroupThreads + consumer_regs * kConsumerThreads <=
         kLaunchRegs * kThreads;
}

}  // namespace moefuse::gemm
