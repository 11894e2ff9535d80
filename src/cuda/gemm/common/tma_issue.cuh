// TMA loads and the transaction arrive issued by one lane of a convergent warp: the instruction is
// predicated on the lane, not branched around. In a branch taken by one lane, ptxas keeps the
// operands (shared addresses, coordinates) in vector registers and wraps every UTMALDG in a
// waterfall loop (ELECT, an R2UR per operand, BRA.U.ANY); with the whole warp running the
// producer's arithmetic, its values stay in uniform registers and the predicate becomes one
// VOTEU. fp8/mainloop.cuh says what that bought. The PTX is CUTLASS's (cute's SM90_TMA_LOAD_*,
// ClusterTransactionBarrier::arrive_and_expect_tx) with a predicate; addresses are shared::cta
// 32-bit, the cache hint kCacheHintNormal, and mask 0 means no multicast.
#pragma once

#include <cuda.h>

#include <cstdint>

#include "cuda/gemm/common/pipeline.cuh"

namespace moefuse::gemm {

// The PTX instruction `op`, executed where operand %0 (the lane's `issue`) is non-zero.
#define MOEFUSE_PTX_IF(op) "{\n\t.reg .pred p;\n\tsetp.ne.b32 p, %0, 0;\n\t@p " op ";\n\t}"
#define MOEFUSE_TMA_LOAD(dims) \
  "cp.async.bulk.tensor." dims "d.shared::cluster.global.mbarrier::complete_tx::bytes"

__device__ __forceinline__ void arrive_expect_tx_if(bool issue, uint32_t barrier,
                                                    uint32_t bytes) {
  asm volatile(MOEFUSE_PTX_IF("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%1], %2")
               ::"r"(uint32_t{issue}), "r"(barrier), "r"(bytes) : "memory");
}

// A box at (c0, c1) of a 2D map into dst, completing on `barrier` (of each CTA in `mask`).
__device__ __forceinline__ void tma_load_2d_if(bool issue, const CUtensorMap* map,
                                               uint32_t barrier, uint32_t dst, int c0, int c1,
                                               uint16_t mask = 0) {
  const uint64_t desc = reinterpret_cast<uint64_t>(map);
  if (mask)
    asm volatile(MOEFUSE_PTX_IF(MOEFUSE_TMA_LOAD("2") ".multicast::cluster.L2::cache_hint "
                                "[%1], [%2, {%5, %6}], [%3], %4, %7")
                 ::"r"(uint32_t{issue}), "r"(dst), "l"(desc), "r"(barrier), "h"(mask), "r"(c0),
                 "r"(c1), "l"(kCacheHintNormal) : "memory");
  else
    asm volatile(MOEFUSE_PTX_IF(MOEFUSE_TMA_LOAD("2") ".L2::cache_hint "
                                "[%1], [%2, {%4, %5}], [%3], %6")
                 ::"r"(uint32_t{issue}), "r"(dst), "l"(desc), "r"(barrier), "r"(c0), "r"(c1),
                 "l"(kCacheHintNormal) : "memory");
}

// The same for a 3D map, at (c0, c1, c2).
__device__ __forceinline__ void tma_load_3d_if(bool issue, const CUtensorMap* map,
                                               uint32_t barrier, uint32_t dst, int c0, int c1,
                                               int c2, uint16_t mask = 0) {
  const uint64_t desc = reinterpret_cast<uint64_t>(map);
  if (mask)
    asm volatile(MOEFUSE_PTX_IF(MOEFUSE_TMA_LOAD("3") ".multicast::cluster.L2::cache_hint "
                                "[%1], [%2, {%5, %6, %7}], [%3], %4, %8")
                 ::"r"(uint32_t{issue}), "r"(dst), "l"(desc), "r"(barrier), "h"(mask), "r"(c0),
                 "r"(c1), "r"(c2), "l"(kCacheHintNormal) : "memory");
  else
    asm volatile(MOEFUSE_PTX_IF(MOEFUSE_TMA_LOAD("3") ".L2::cache_hint "
                                "[%1], [%2, {%4, %5, %6}], [%3], %7")
                 ::"r"(uint32_t{issue}), "r"(dst), "l"(desc), "r"(barrier), "r"(c0), "r"(c1),
                 "r"(c2), "l"(kCacheHintNormal) : "memory");
}

#undef MOEFUSE_TMA_LOAD
#undef MOEFUSE_PTX_IF

}  // namespace moefuse::gemm
