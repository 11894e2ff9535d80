// The gather producers' copy (forward FC1 and the gather-fused wgrad): one 16-byte cp.async from
// global into shared memory. src_bytes = 0 writes zeros, which is how rows without a token and the
// K tail read as zeros without a branch around the copy.
#pragma once

#include <cstdint>

namespace moefuse::gemm {

__device__ __forceinline__ void cp_async_16(void* dst, const void* src, int src_bytes) {
  const uint32_t d = static_cast<uint32_t>(__cvta_generic_to_shared(dst));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(d), "l"(src),
               "r"(src_bytes)
               : "memory");
}

}  // namespace moefuse::gemm
