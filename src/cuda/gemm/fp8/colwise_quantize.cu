// Column-wise grouped FP8 quantisation (moefuse/grouped_gemm_fp8_wgrad.h): x [M_cap, N] bf16 →
// xt [N, 128 G] e4m3 + scales [G, N] fp32, one 128-row group of one expert per scale.
//
// Mapping: CTA (g, y) owns global group g (its expert and rows from colwise_groups.h) and the 128
// columns n0 = 128 y .. of x. Its 256 threads
//   1. compute group_start[E + 1] (warp 0, the GEMM's scan) and find the group;
//   2. load the 128 × 128 bf16 block with 16-byte loads, 8 per thread all in flight (rows past
//      the group's end and columns past N read as zeros), and store it into shared memory;
//   3. transpose through shared memory: thread (cp = t % 64, q = t / 64) reads the column pair
//      2cp, 2cp + 1 of rows 32q .. 32q + 31 (a warp reads one 128-word row: no bank conflict),
//      takes the pair's amax over its 32 rows, and the four quarters combine through shared
//      memory;
//   4. quantises its 2 × 32 values with the 1x128 recipe (formats::blockwise_scale, the
//      hardware E4M3 conversion of cuda/quant/vec16.cuh, bit-exact with the reference) and
//      stores each column's 32 codes as two 16-byte stores into xt's row; quarter 0 stores the
//      pair's scales. Padding rows (the group's tail up to 128) are zeros, so they encode as 0x00.
#include <cuda_bf16.h>

#include <cstdint>

#include "cuda/check.h"
#include "cuda/device.h"
#include "cuda/gemm/device_scheduler.cuh"
#include "cuda/gemm/fp8/colwise_groups.h"
#include "cuda/quant/vec16.cuh"
#include "formats/recipes.h"
#include "moefuse/grouped_gemm_fp8_wgrad.h"

namespace moefuse::gemm::fp8 {
namespace {

inline constexpr int kThreads = 256;
inline constexpr int kCols = 128;                         // columns of x per CTA
inline constexpr int kVectors = kColwiseGroup * kCols / 8;  // 16-byte bf16 vectors per block
inline constexpr int kLoadsPerThread = kVectors / kThreads;
inline constexpr int kQuarters = kThreads / (kCols / 2);  // row quarters of the group
inline constexpr int kQuarterRows = kColwiseGroup / kQuarters;
static_assert(kLoadsPerThread * kThreads == kVectors && kQuarterRows == 32);

struct ColwiseQuantParams {
  const __nv_bfloat16* x;  // [m_cap, n]
  const int* offsets;      // [num_experts + 1]
  uint8_t* xt;             // [n, 128 · groups]
  float* scales;           // [groups, n]
  int m_cap, n, num_experts, groups;
};

__device__ __forceinline__ float bf16_low(uint32_t w) { return formats::bits_float(w << 16); }
__device__ __forceinline__ float bf16_high(uint32_t w) {
  return formats::bits_float(w & 0xFFFF0000u);
}

__global__ void __launch_bounds__(kThreads) colwise_quantize_kernel(const ColwiseQuantParams p) {
  __shared__ alignas(16) uint32_t block[kColwiseGroup][kCols / 2];  // bf16 pairs
  __shared__ float quarter_amax[kQuarters][kCols];
  __shared__ int group_start[kGroupedGemmMaxExperts + 1];
  if (threadIdx.x < 32) warp_tile_starts(p.offsets, p.num_experts, colwise_group_shape(), group_start);
  __syncthreads();
  const int g = blockIdx.x;
  if (g >= min(group_start[p.num_experts], p.groups)) return;  // uniform over the CTA
  const ColwiseGroup grp = colwise_group(g, p.offsets, group_start, p.num_experts);
  const int n0 = blockIdx.y * kCols;

  uint4 v[kLoadsPerThread];
#pragma unroll
  for (int u = 0; u < kLoadsPerThread; ++u) {
    const int i = threadIdx.x + kThreads * u, r = i / (kCols / 8), c = n0 + (i % (kCols / 8)) * 8;
    const int row = grp.first_row + r;
    const bool ok = r < grp.rows && row >= 0 && row < p.m_cap && c < p.n;
    v[u] = ok ? __ldg(reinterpret_cast<const uint4*>(p.x + static_cast<int64_t>(row) * p.n + c))
              : make_uint4(0, 0, 0, 0);
  }
#pragma unroll
  for (int u = 0; u < kLoadsPerThread; ++u) {
    const int i = threadIdx.x + kThreads * u;
    *reinterpret_cast<uint4*>(&block[i / (kCols / 8)][(i % (kCols / 8)) * 4]) = v[u];
  }
  __syncthreads();

  const int cp = threadIdx.x % (kCols / 2), q = threadIdx.x / (kCols / 2);
  uint32_t w[kQuarterRows];
  float amax0 = 0.0f, amax1 = 0.0f;  // fmaxf skips NaN, as formats::amax_bits
#pragma unroll
  for (int i = 0; i < kQuarterRows; ++i) {
    w[i] = block[q * kQuarterRows + i][cp];
    amax0 = fmaxf(amax0, fabsf(bf16_low(w[i])));
    amax1 = fmaxf(amax1, fabsf(bf16_high(w[i])));
  }
  quarter_amax[q][2 * cp] = amax0;
  quarter_amax[q][2 * cp + 1] = amax1;
  __syncthreads();
#pragma unroll
  for (int j = 0; j < kQuarters; ++j) {
    amax0 = fmaxf(amax0, quarter_amax[j][2 * cp]);
    amax1 = fmaxf(amax1, quarter_amax[j][2 * cp + 1]);
  }
  const int col = n0 + 2 * cp;
  if (col >= p.n) return;  // N % 8 == 0: a pair is entirely in or out
  const formats::BlockwiseScale s0 = formats::blockwise_scale(amax0);
  const formats::BlockwiseScale s1 = formats::blockwise_scale(amax1);
  if (q == 0)
    *reinterpret_cast<float2*>(p.scales + static_cast<int64_t>(g) * p.n + col) =
        make_float2(s0.scale, s1.scale);
  const int64_t pitch = int64_t{p.groups} * kColwiseGroup;
  uint8_t* out0 = p.xt + col * pitch + int64_t{g} * kColwiseGroup + q * kQuarterRows;
  uint32_t c0[kQuarterRows / 4], c1[kQuarterRows / 4];
#pragma unroll
  for (int k = 0; k < kQuarterRows / 4; ++k) {
    const uint32_t* x4 = &w[4 * k];
    c0[k] = cuda::quant::e4m3x4(bf16_low(x4[0]) * s0.multiplier, bf16_low(x4[1]) * s0.multiplier,
                                bf16_low(x4[2]) * s0.multiplier, bf16_low(x4[3]) * s0.multiplier);
    c1[k] = cuda::quant::e4m3x4(bf16_high(x4[0]) * s1.multiplier,
                                bf16_high(x4[1]) * s1.multiplier,
                                bf16_high(x4[2]) * s1.multiplier,
                                bf16_high(x4[3]) * s1.multiplier);
  }
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    *reinterpret_cast<uint4*>(out0 + 16 * h) =
        make_uint4(c0[4 * h], c0[4 * h + 1], c0[4 * h + 2], c0[4 * h + 3]);
    *reinterpret_cast<uint4*>(out0 + pitch + 16 * h) =
        make_uint4(c1[4 * h], c1[4 * h + 1], c1[4 * h + 2], c1[4 * h + 3]);
  }
}

}  // namespace
}  // namespace moefuse::gemm::fp8

namespace moefuse {

void quantize_fp8_colwise_grouped(const TensorView& x, const TensorView& offsets,
                                  const TensorView& xt, const TensorView& scales,
                                  cudaStream_t stream) {
  validate_quantize_fp8_colwise_grouped(x, offsets, xt, scales, Device::kCuda, DType::kBFloat16);
  cuda::expect_launchable(stream);
  const int groups = static_cast<int>(scales.size(0)), n = static_cast<int>(x.size(1));
  if (groups == 0) return;  // no row can have a group
  const gemm::fp8::ColwiseQuantParams p{.x = x.as<const __nv_bfloat16>(),
                                        .offsets = offsets.as<const int>(),
                                        .xt = xt.as<uint8_t>(),
                                        .scales = scales.as<float>(),
                                        .m_cap = static_cast<int>(x.size(0)),
                                        .n = n,
                                        .num_experts = static_cast<int>(offsets.size(0) - 1),
                                        .groups = groups};
  const dim3 grid(groups, gemm::ceil_div(n, gemm::fp8::kCols));
  gemm::fp8::colwise_quantize_kernel<<<grid, gemm::fp8::kThreads, 0, stream>>>(p);
  MOEFUSE_CUDA_CHECK_LAUNCH();
}

}  // namespace moefuse
