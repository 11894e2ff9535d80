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

// 32-bit shared-address forms of the barrier waits and arrives and of scalar shared loads and
// stores, for loops that keep their stage addresses as integers: the pointer forms convert a
// generic address every iteration, and a float* into the stage compiles to a generic load (LD),
// not LDS. The barrier PTX is cutlass::arch::ClusterBarrier's. All but mapa (a pure function)
// are volatile, so the compiler keeps their order relative to the waits and arrives around them.
__device__ __forceinline__ uint32_t shared_address(const void* smem) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(smem));
}
__device__ __forceinline__ void wait_barrier(uint32_t barrier, uint32_t phase) {
  constexpr uint32_t kTicks = 0x989680;  // try_wait's suspend hint, as in CUTLASS
  asm volatile(
      "{\n\t"
      ".reg .pred P1;\n\t"
      "WAIT:\n\t"
      "mbarrier.try_wait.parity.shared::cta.b64 P1, [%0], %1, %2;\n\t"
      "@P1 bra DONE;\n\t"
      "bra WAIT;\n\t"
      "DONE:\n\t"
      "}" ::"r"(barrier),
      "r"(phase), "r"(kTicks));
}
// The shared::cluster address of `addr` (shared::cta) in CTA `cta` of the cluster. A CTA's shared
// memory is one contiguous range of the cluster window, so offsets carry over: the address of
// addr + d is the result + d.
__device__ __forceinline__ uint32_t cluster_address(uint32_t addr, uint32_t cta) {
  uint32_t remote;
  asm("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(remote) : "r"(addr), "r"(cta));
  return remote;
}
// Arrive on a barrier by its shared::cluster address (possibly in another CTA).
__device__ __forceinline__ void arrive_cluster_barrier(uint32_t remote) {
  asm volatile("mbarrier.arrive.shared::cluster.b64 _, [%0];" ::"r"(remote));
}
__device__ __forceinline__ float ld_shared_f32(uint32_t addr) {
  float v;
  asm volatile("ld.shared.f32 %0, [%1];" : "=f"(v) : "r"(addr));
  return v;
}
__device__ __forceinline__ void st_shared_f32(uint32_t addr, float v) {
  asm volatile("st.shared.f32 [%0], %1;" ::"r"(addr), "f"(v) : "memory");
}

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
