// The unfused twin's separate kernels: a row gather (x → permuted copy) and the elementwise
// epilogue (bias, activation, row scale) that the fused kernel does in registers. Memory-bound,
// 16-byte accesses; one block per row, rows outside [offsets[0], offsets[E]) untouched.
#include <cuda_bf16.h>

#include <cstdint>

#include "cuda/check.h"
#include "cuda/gemm/epilogues/activation.h"
#include "cuda/gemm/launch.h"

namespace moefuse::gemm {
namespace {

constexpr int kThreads = 256;

// The rows this launch may touch: [offsets[0], min(offsets[E], m_cap)).
__device__ __forceinline__ bool row_in_range(const GemmProblem& p, int row) {
  return row >= __ldg(p.offsets) && row < min(__ldg(p.offsets + p.num_experts), p.m_cap);
}

// The expert owning `row`: the largest e < E with offsets[e] <= row (skips empty experts).
__device__ __forceinline__ int expert_of_row(const GemmProblem& p, int row) {
  int lo = 0, hi = p.num_experts - 1;
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (__ldg(p.offsets + mid) <= row) lo = mid;
    else hi = mid - 1;
  }
  return lo;
}

__global__ void gather_rows_kernel(const GemmProblem p, __nv_bfloat16* out) {
  const int row = blockIdx.x;
  if (!row_in_range(p, row)) return;
  const int token = __ldg(p.gather_index + row);
  const bool valid = token >= 0 && token < p.gather_rows;
  const auto* src = reinterpret_cast<const uint4*>(p.gather_x + int64_t{valid ? token : 0} * p.k);
  auto* dst = reinterpret_cast<uint4*>(out + int64_t{row} * p.k);
  for (int c = threadIdx.x; c < p.k / 8; c += blockDim.x)
    dst[c] = valid ? src[c] : make_uint4(0, 0, 0, 0);
}

// 8 consecutive values as fp32, from bf16 or fp32 memory (16-byte aligned).
__device__ __forceinline__ void load8(const __nv_bfloat16* src, float (&v)[8]) {
  const uint4 raw = *reinterpret_cast<const uint4*>(src);
  const auto* h = reinterpret_cast<const __nv_bfloat162*>(&raw);
  for (int i = 0; i < 4; ++i) {
    const float2 f = __bfloat1622float2(h[i]);
    v[2 * i] = f.x, v[2 * i + 1] = f.y;
  }
}
__device__ __forceinline__ void load8(const float* src, float (&v)[8]) {
  const float4 a = reinterpret_cast<const float4*>(src)[0];
  const float4 b = reinterpret_cast<const float4*>(src)[1];
  v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w, v[4] = b.x, v[5] = b.y, v[6] = b.z, v[7] = b.w;
}
__device__ __forceinline__ void store8(__nv_bfloat16* dst, const float (&v)[8]) {
  uint4 raw;
  auto* h = reinterpret_cast<__nv_bfloat162*>(&raw);
  for (int i = 0; i < 4; ++i) h[i] = __floats2bfloat162_rn(v[2 * i], v[2 * i + 1]);
  *reinterpret_cast<uint4*>(dst) = raw;
}
__device__ __forceinline__ void store8(float* dst, const float (&v)[8]) {
  reinterpret_cast<float4*>(dst)[0] = make_float4(v[0], v[1], v[2], v[3]);
  reinterpret_cast<float4*>(dst)[1] = make_float4(v[4], v[5], v[6], v[7]);
}

// h [m_cap, n] (InT) → D [m_cap, n_out] (OutT). With a bias and ep.pre, h (= ep.pre) is
// rewritten with the bias added, as the fused kernel saves it.
template <class InT, class OutT>
__global__ void epilogue_elementwise_kernel(const GemmProblem p, const EpilogueParams ep,
                                            const InT* h) {
  const int row = blockIdx.x;
  if (!row_in_range(p, row)) return;
  const float* bias = ep.bias ? ep.bias + int64_t{expert_of_row(p, row)} * p.n : nullptr;
  const float scale = ep.row_scale ? __ldg(ep.row_scale + row) : 1.0f;
  InT* h_row = const_cast<InT*>(h) + int64_t{row} * p.n;
  OutT* d_row = static_cast<OutT*>(p.d) + int64_t{row} * p.n_out;
  if (is_glu_op(ep.op)) {
    // One 16-column block: 8 gate columns then their 8 up columns → 8 outputs.
    for (int q = threadIdx.x; q < p.n / 16; q += blockDim.x) {
      float g[8], u[8], out[8];
      load8(h_row + 16 * q, g);
      load8(h_row + 16 * q + 8, u);
      if (bias) {
        for (int i = 0; i < 8; ++i) g[i] += bias[16 * q + i], u[i] += bias[16 * q + 8 + i];
        store8(h_row + 16 * q, g);
        store8(h_row + 16 * q + 8, u);
      }
      for (int i = 0; i < 8; ++i) out[i] = apply_epilogue_op(ep, g[i], u[i]) * scale;
      store8(d_row + 8 * q, out);
    }
  } else {
    for (int c = threadIdx.x; c < p.n / 8; c += blockDim.x) {
      float v[8], out[8];
      load8(h_row + 8 * c, v);
      if (bias) {
        for (int i = 0; i < 8; ++i) v[i] += bias[8 * c + i];
        if (ep.pre) store8(h_row + 8 * c, v);
      }
      for (int i = 0; i < 8; ++i) out[i] = apply_epilogue_op(ep, v[i], 0.0f) * scale;
      store8(d_row + 8 * c, out);
    }
  }
}

}  // namespace

void launch_gather_rows(const GemmProblem& problem, __nv_bfloat16* out, cudaStream_t stream) {
  if (problem.m_cap == 0) return;
  gather_rows_kernel<<<problem.m_cap, kThreads, 0, stream>>>(problem, out);
  MOEFUSE_CUDA_CHECK_LAUNCH();
}

void launch_epilogue_elementwise(const GemmProblem& problem, const EpilogueParams& ep,
                                 bool out_fp32, cudaStream_t stream) {
  if (problem.m_cap == 0) return;
  const dim3 grid(problem.m_cap), block(kThreads);
  if (ep.pre) {  // h is the bf16 intermediate
    if (out_fp32)
      epilogue_elementwise_kernel<__nv_bfloat16, float><<<grid, block, 0, stream>>>(problem, ep,
                                                                                   ep.pre);
    else
      epilogue_elementwise_kernel<__nv_bfloat16, __nv_bfloat16>
          <<<grid, block, 0, stream>>>(problem, ep, ep.pre);
  } else if (out_fp32) {  // in place on D
    epilogue_elementwise_kernel<float, float>
        <<<grid, block, 0, stream>>>(problem, ep, static_cast<const float*>(problem.d));
  } else {
    epilogue_elementwise_kernel<__nv_bfloat16, __nv_bfloat16>
        <<<grid, block, 0, stream>>>(problem, ep, static_cast<const __nv_bfloat16*>(problem.d));
  }
  MOEFUSE_CUDA_CHECK_LAUNCH();
}

}  // namespace moefuse::gemm
