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

// 32-bit shared-address forms of the barrier waits and arrives and of fp32 shared loads and
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
__device__ __forceinline__ float2 ld_shared_f32x2(uint32_t addr) {
  float2 v;
  asm volatile("ld.shared.v2.f32 {%0, %1}, [%2];" : "=f"(v.x), "=f"(v.y) : "r"(addr));
  return v;
}
__device__ __forceinline__ void st_shared_f32(uint32_t addr, float v) {
  asm volatile("st.shared.f32 [%0], %1;" ::"r"(addr), "f"(v) : "memory");
}

// By one thread, before the CTA-wide __syncthreads (and before fence_barrier_init).
// empty_arrivals: every consumer thread arrives by default; the clustered pipelines have one
// arrival per consumer warp and CTA of the cluster (empty_arrivals below, fp8/mainloop.cuh).
template <int kStages>
__device__ __forceinline__ void init_stage_barriers(uint64_t* full, uint64_t* empty,
                                                    int full_arrivals,
                                                    int empty_arrivals = kConsumerThreads) {
  for (int s = 0; s < kStages; ++s) {
    ClusterBarrier::init(&full[s], full_arrivals);
    ClusterBarrier::init(&empty[s], empty_arrivals);
  }
}

// The consumers' release of a stage they have read, in a kernel of kCluster CTAs a cluster: every
// consumer thread on its own CTA's empty barrier (kCluster 1), or lane c < kCluster of each
// consumer warp on the empty barrier of CTA c, whose producer multicasts into this CTA's stage
// too (the forward and dgrad kernels' clusters; wait_group is .sync.aligned, so the whole warp is
// past its reads). The empty barriers count empty_arrivals<kCluster>().
template <int kCluster>
__device__ __forceinline__ void release_stage(uint64_t* empty) {
  if constexpr (kCluster == 1) {
    ClusterBarrier::arrive(empty);
  } else {
    const uint32_t lane = threadIdx.x % 32;
    ClusterBarrier::arrive(empty, lane, lane < kCluster);
  }
}
template <int kCluster>
constexpr int empty_arrivals() {
  return kCluster == 1 ? kConsumerThreads : (kConsumerThreads / 32) * kCluster;
}

// A phantom tile's K loop (cluster_scheduler.h): every stage waited for (the peers' multicasts
// land in it) and released, nothing computed. Layout: a HandoffSharedLayout.
template <int kCluster, class Layout, int kStages>
__device__ __forceinline__ void skip_phantom(int k_blocks, const Layout& smem,
                                             PipelineState<kStages>& pipe) {
  for (int kb = 0; kb < k_blocks; ++kb) {
    ClusterBarrier::wait(&smem.full[pipe.stage], pipe.phase);
    release_stage<kCluster>(&smem.empty[pipe.stage]);
    pipe.advance();
  }
}

}  // namespace moefuse::gemm
