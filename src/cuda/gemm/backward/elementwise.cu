// The backward's small memory-bound kernels: the fused FC2 dgrad's dp reduction and the unfused
// twin's elementwise activation backward. Rows outside [offsets[0], min(offsets[E], m_cap)) are
// untouched; every reduction runs in a fixed order (deterministic).
#include <cuda_bf16.h>

#include <cstdint>

#include "cuda/check.h"
#include "cuda/gemm/backward/activation_backward.h"
#include "cuda/gemm/backward/launch.h"
#include "cuda/gemm/tile_scheduler.h"
#include "cuda/packed_values.cuh"

namespace moefuse::gemm::bwd {
namespace {

constexpr int kThreads = 256;

__device__ __forceinline__ bool row_in_range(const int* offsets, int num_experts, int m_cap,
                                             int row) {
  return row >= __ldg(offsets) && row < min(__ldg(offsets + num_experts), m_cap);
}

// ⟨dys[row], b2[e]⟩ over the first `lanes` threads' strided share (8 elements a step), fp32.
__device__ __forceinline__ float bias_dot_share(const DpReduce& r, int row, int lane, int lanes) {
  if (!r.b2) return 0.0f;
  // The owning expert: the largest e with offsets[e] <= row (skips empty experts).
  const int e = find_expert(r.offsets, r.num_experts, row);
  const __nv_bfloat16* dy = r.dys + static_cast<int64_t>(row) * r.hidden;
  const float* b = r.b2 + static_cast<int64_t>(e) * r.hidden;
  float s = 0.0f;
  for (int c = lane; c < r.hidden / 8; c += lanes) {
    const uint4 raw = *reinterpret_cast<const uint4*>(dy + 8 * c);
    const auto* h = reinterpret_cast<const __nv_bfloat162*>(&raw);
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const float2 v = __bfloat1622float2(h[i]);
      s = fmaf(v.x, __ldg(b + 8 * c + 2 * i), s);
      s = fmaf(v.y, __ldg(b + 8 * c + 2 * i + 1), s);
    }
  }
  return s;
}

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int d = 16; d > 0; d /= 2) v += __shfl_xor_sync(0xffffffffu, v, d);
  return v;
}

// One warp per row.
__global__ void dp_reduce_kernel(const DpReduce r) {
  const int row = blockIdx.x * (kThreads / 32) + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (!row_in_range(r.offsets, r.num_experts, r.m_cap, row)) return;
  const float bias = warp_sum(bias_dot_share(r, row, lane, 32));
  if (lane != 0) return;
  float s = 0.0f;
  const float* partial = r.dp_partial + static_cast<int64_t>(row) * r.dp_stride;
  for (int b = 0; b < r.dp_blocks; ++b) s += partial[b];
  r.dp[row] = s + bias;
}

// One block per row: 8 outputs (one 16-column gate/up block of pre for GLU) per thread step.
__global__ void dglu_elementwise_kernel(const DgradProblem p, const DGluEpilogue ep,
                                        const __nv_bfloat16* g, const DpReduce r) {
  const int row = blockIdx.x;
  if (!row_in_range(p.offsets, p.num_experts, p.m_cap, row)) return;
  const bool glu = is_glu_op(ep.act.op);
  const int pre_cols = glu ? 2 * p.n : p.n;
  const float scale = ep.row_scale ? __ldg(ep.row_scale + row) : 1.0f;
  const __nv_bfloat16* g_row = g + static_cast<int64_t>(row) * p.n;
  const __nv_bfloat16* pre = ep.pre + static_cast<int64_t>(row) * pre_cols;
  __nv_bfloat16* d_pre = ep.d_pre + static_cast<int64_t>(row) * pre_cols;
  float dp = 0.0f;
  for (int q = threadIdx.x; q < p.n / 8; q += blockDim.x) {
    const int gcol = glu ? 16 * q : 8 * q;
#pragma unroll
    for (int i = 0; i < 8; i += 2) {
      const float2 gv = cuda::load_pair(g_row + 8 * q + i);
      const float2 gate = cuda::load_pair(pre + gcol + i);
      const float2 up = glu ? cuda::load_pair(pre + gcol + 8 + i) : make_float2(0.0f, 0.0f);
      const ActivationGrad a0 = activation_grad(ep.act, gate.x, up.x);
      const ActivationGrad a1 = activation_grad(ep.act, gate.y, up.y);
      dp = fmaf(gv.x, a0.value, dp);
      dp = fmaf(gv.y, a1.value, dp);
      const float da0 = scale * gv.x, da1 = scale * gv.y;
      cuda::store_pair(d_pre + gcol + i, da0 * a0.d_gate, da1 * a1.d_gate);
      if (glu) cuda::store_pair(d_pre + gcol + 8 + i, da0 * a0.d_up, da1 * a1.d_up);
      if (ep.scaled_act)
        cuda::store_pair(ep.scaled_act + static_cast<int64_t>(row) * p.n + 8 * q + i,
                   scale * a0.value, scale * a1.value);
    }
  }
  if (!r.dp) return;
  // Block reduction in a fixed tree: warp sums, then warp 0 over the 8 warp sums.
  __shared__ float warp_sums[kThreads / 32];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  dp = warp_sum(dp + bias_dot_share(r, row, threadIdx.x, blockDim.x));
  if (lane == 0) warp_sums[warp] = dp;
  __syncthreads();
  if (warp == 0) {
    const float v = warp_sum(lane < kThreads / 32 ? warp_sums[lane] : 0.0f);
    if (lane == 0) r.dp[row] = v;
  }
}

}  // namespace

void launch_dp_reduce(const DpReduce& r, cudaStream_t stream) {
  if (r.m_cap == 0) return;
  const int rows_per_block = kThreads / 32;
  dp_reduce_kernel<<<(r.m_cap + rows_per_block - 1) / rows_per_block, kThreads, 0, stream>>>(r);
  MOEFUSE_CUDA_CHECK_LAUNCH();
}

void launch_dglu_elementwise(const DgradProblem& problem, const DGluEpilogue& ep,
                             const __nv_bfloat16* g, const DpReduce& r, cudaStream_t stream) {
  if (problem.m_cap == 0) return;
  dglu_elementwise_kernel<<<problem.m_cap, kThreads, 0, stream>>>(problem, ep, g, r);
  MOEFUSE_CUDA_CHECK_LAUNCH();
}

}  // namespace moefuse::gemm::bwd
