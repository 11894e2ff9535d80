// Which epilogue thread a thread is, in the kernels with the overlapped epilogue: warps 1-3 of
// warpgroup 0 are epilogue warps 0-2, and where a fourth warpgroup drains too (the narrow BF16
// dGLU dgrad, the FP8 kernel's dGLU and E4M3 output at short K) its warps are 3-6. (The BF16
// forward cannot have one: its m64n256 wgmma needs more than the 128 registers a thread of a
// 512-thread CTA is compiled for; ptxas refuses it, C7602.)
#pragma once

#include "cuda/gemm/common/warp_roles.h"

namespace moefuse::gemm {

struct EpilogueLane {
  int warp;
  int lane;
  __device__ static EpilogueLane of_thread() {
    constexpr int kFourthWarpgroupWarp = (1 + kConsumerWarpgroups) * kWarpgroupThreads / 32;
    const int w = static_cast<int>(threadIdx.x) / 32;
    return EpilogueLane{
        .warp = w < kFourthWarpgroupWarp ? w - 1 : w - kFourthWarpgroupWarp + kEpilogueWarps,
        .lane = static_cast<int>(threadIdx.x) % 32};
  }
  // The thread's index among the epilogue threads.
  __device__ int worker() const { return 32 * warp + lane; }
};

}  // namespace moefuse::gemm
