// The stage pipeline shared by the GEMM kernels' producers and consumers: kStages shared-memory
// stages, each with a `full` mbarrier (producer → consumers: arrive count `full_arrivals` plus
// the transaction bytes) and an `empty` mbarrier (consumers → producer: count 256), and the
// (stage, phase) position every role keeps. Each kernel's mainloop states its own protocol.
#pragma once

#include <cute/arch/copy_sm90_desc.hpp>
#include <cutlass/arch/barrier.h>

#include <cstdint>

#include "cuda/gemm/common/warp_roles.h"

namespace moefuse::gemm {

using cutlass::arch::ClusterBarrier;
using cutlass::arch::ClusterTransactionBarrier;

// The cache hint of the producers' TMA loads.
inline constexpr uint64_t kCacheHintNormal =
    static_cast<uint64_t>(cute::TMA::CacheHintSm90::EVICT_NORMAL);

// A role's position in the ring: parity waits use `phase` (consumers wait full with phase, the
// producer waits empty with phase ^ 1, which a fresh barrier passes).
template <int kStages>
struct PipelineState {
  int stage = 0;
  uint32_t phase = 0;
  __device__ void advance() {
    if (++stage == kStages) {
      stage = 0;
      phase ^= 1u;
    }
  }
};

// By one thread, before the CTA-wide __syncthreads (and before fence_barrier_init).
// empty_arrivals: every consumer thread arrives by default; the FP8 kernel's cluster pipeline
// has one arrival per consumer warp and CTA of the cluster (fp8/mainloop.cuh).
template <int kStages>
__device__ __forceinline__ void init_stage_barriers(uint64_t* full, uint64_t* empty,
                                                    int full_arrivals,
                                                    int empty_arrivals = kConsumerThreads) {
  for (int s = 0; s < kStages; ++s) {
    ClusterBarrier::init(&full[s], full_arrivals);
    ClusterBarrier::init(&empty[s], empty_arrivals);
  }
}

}  // namespace moefuse::gemm
