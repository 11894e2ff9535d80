// Device pieces shared by the clustered kernels (fp8/kernel.cuh, kernel.cuh,
// backward/dgrad_kernel.cuh):
// the cluster-wide barrier and a warp-uniform copy of a value.
#pragma once

namespace moefuse::gemm {

// Every thread of every CTA; not .aligned, so lanes that took different roles may call it.
__device__ __forceinline__ void cluster_sync_all() {
  asm volatile("barrier.cluster.arrive.release;\n" ::: "memory");
  asm volatile("barrier.cluster.wait.acquire;\n" ::: "memory");
}

// v, the same in every lane of the warp, through a warp reduction: REDUX writes a uniform
// register, so ptxas knows the value is warp-uniform as well, and branches and loops on it are
// convergent. ptxas keeps values in uniform registers only in convergent code, and a consumer's
// K loop needs that: the conditions around it — the role (warpgroup), the unit loop's end
// (read from shared memory) and the phantom test (from memory) — go through here. With any one
// of them left as a plain value, the FP8 K loop's stage arithmetic, addresses and wgmma
// descriptors fall back to vector registers and R2UR moves: 74-78 instead of 40-45 SASS
// instructions per K block besides the 64 FFMAs and 4 QGMMAs (fp8/mainloop.cuh; its three
// instantiations, CUDA 13.0).
__device__ __forceinline__ int warp_uniform(int v) { return __reduce_max_sync(0xffffffffu, v); }

}  // namespace moefuse::gemm
