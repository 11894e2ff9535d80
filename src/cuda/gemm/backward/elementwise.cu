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
#include "cuda/router/warp_select.cuh"  // warp_sum

namespace moefuse::gemm::bwd {
namespace {

constexpr int kThreads = 256;

__device__ __forceinline__ bool row_in_range(const int* offsets, int num_experts, int m_cap,
                                             int row) {
  return row >= __ldg(offsets) && row < min(__ldg(offsets + num_experts), m_cap);
}

// ⟨dys[row], b2[e]⟩ over the first `lanes` threads' strided share (8 elements a step), fp32.
// b2's 8 floats of a step come as two 16-byte loads (validate_fc2_dgrad checks its alignment;
// H is a multiple of 8). As 8 scalar loads, each lane's 32-byte stride spread a warp's load
// over 8 cache lines: 64 L1 wavefronts a step against the dys vector's 4, which bounded
// dp_reduce at 1.7 TB/s on gpt-oss (234 µs in the layer's graph, now 118: session 35, call 1).
__device__ __forceinline__ float bias_dot_share(const DpReduce& r, int row, int lane, int lanes) {
  if (!r.b2) return 0.0f;
  // The owning expert: the largest e with offsets[e] <= row (skips empty experts).
  const int e = find_expert(r.offsets, r.num_experts, row);
  const uint4* dy = reinterpret_cast<const uint4*>(r.dys + static_cast<int64_t>(row) * r.hidden);
  const float4* b = reinterpret_cast<const float4*>(r.b2 + static_cast<int64_t>(e) * r.hidden);
  float s = 0.0f;
  for (int c = lane; c < r.hidden / 8; c += lanes) {
    const uint4 raw = dy[c];
    const auto* h = reinterpret_cast<const __nv_bfloat162*>(&raw);
    const float4 lo = __ldg(b + 2 * c), hi = __ldg(b + 2 * c + 1);
    const float w[8] = {lo.x, lo.y, lo.z, lo.w, hi.x, hi.y, hi.z, hi.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const float2 v = __bfloat1622float2(h[i]);
      s = fmaf(v.x, w[2 * i], s);
      s = fmaf(v.y, w[2 * i + 1], s);
    }
  }
  return s;
}

// Σ of the row's dp partials, in n-block order, then of its b2 term's pieces, in piece order.
__device__ __forceinline__ float partial_sum(const DpReduce& r, int row) {
  const float* partial = r.dp_partial + static_cast<int64_t>(row) * r.dp_stride;
  float s = 0.0f;
  for (int b = 0; b < r.dp_blocks; ++b) s += partial[b];
  if (r.bias_pieces == 0) return s;
  float bias = 0.0f;
  for (int q = 0; q < r.bias_pieces; ++q) bias += r.bias_partial[int64_t{q} * r.m_cap + row];
  return s + bias;
}

// With b2 and no bias partials: one warp per row, whose lanes share the bias dot.
__global__ void dp_reduce_bias_kernel(const DpReduce r) {
  const int row = blockIdx.x * (kThreads / 32) + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (!row_in_range(r.offsets, r.num_experts, r.m_cap, row)) return;
  const float bias = cuda::warp_sum(bias_dot_share(r, row, lane, 32));
  if (lane == 0) r.dp[row] = partial_sum(r, row) + bias;
}

// Otherwise one thread per row (a warp per row, 31 lanes idle, took 19.8 µs on qwen3's 131072
// rows, this 2.8: session 35, call 1).
__global__ void dp_reduce_kernel(const DpReduce r) {
  const int row = blockIdx.x * kThreads + threadIdx.x;
  if (row_in_range(r.offsets, r.num_experts, r.m_cap, row)) r.dp[row] = partial_sum(r, row);
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
  dp = cuda::warp_sum(dp + bias_dot_share(r, row, threadIdx.x, blockDim.x));
  if (lane == 0) warp_sums[warp] = dp;
  __syncthreads();
  if (warp == 0) {
    const float v = cuda::warp_sum(lane < kThreads / 32 ? warp_sums[lane] : 0.0f);
    if (lane == 0) r.dp[row] = v;
  }
}

}  // namespace

void launch_dp_reduce(const DpReduce& r, cudaStream_t stream) {
  if (r.m_cap == 0) return;
  if (r.b2 && !r.bias_partial) {
    constexpr int rows_per_block = kThreads / 32;
    dp_reduce_bias_kernel<<<(r.m_cap + rows_per_block - 1) / rows_per_block, kThreads, 0,
                            stream>>>(r);
  } else {
    dp_reduce_kernel<<<(r.m_cap + kThreads - 1) / kThreads, kThreads, 0, stream>>>(r);
  }
  MOEFUSE_CUDA_CHECK_LAUNCH();
}

void launch_dglu_elementwise(const DgradProblem& problem, const DGluEpilogue& ep,
                             const __nv_bfloat16* g, const DpReduce& r, cudaStream_t stream) {
  if (problem.m_cap == 0) return;
  dglu_elementwise_kernel<<<problem.m_cap, kThreads, 0, stream>>>(problem, ep, g, r);
  MOEFUSE_CUDA_CHECK_LAUNCH();
}

}  // namespace moefuse::gemm::bwd
