// The MXFP8 emulation (mxfp8_emulation.h): the workspace layout, the BF16 GEMM's arguments, and
// the dequantise kernel, e4m3 codes with K-major UE8M0 scales -> bf16.
//
// The kernel reads the scale layouts of moefuse/grouped_gemm_fp8.h as they are: entry
// [batch, g, r] of a [batches, K/32, pitch] e8m0 tensor scales codes[batch · batch_rows + r,
// 32g .. 32g+31]; a is one batch of M_cap rows with pitch mxfp8_scale_rows(M_cap), b is E batches
// of N rows with pitch N.
//
// Work: a CTA converts blocks of 32 rows × 512 of K (16 scale groups), grid-stride. It first
// stages the block's 32 × 16 scale bytes in shared memory (for each group the 32 rows' scales are
// 32 consecutive bytes of a scale row, so the loads take whole sectors), then each warp converts
// 4 rows, each in two halves of 256 elements: lane l takes elements 8l .. 8l + 7 of a half
// (group l / 4 of the half's 8), so every load instruction of the warp reads 256 contiguous
// bytes of codes and every store instruction writes 512 contiguous bytes of bf16: whole sectors,
// none shared between instructions. A lane issues its 8 loads (4 rows × 2 halves) before
// converting any. The first version (run 11) gave each warp 16 rows × 64 of K: each of its store
// instructions wrote half of every sector it touched, in 16 rows, and the passes ran at 1.1 TB/s,
// a quarter of copy.
//
// Conversion, exact but at the range ends (moefuse/grouped_gemm_fp8.h): the hardware E4M3
// decode (quant/vec16.cuh, = formats::e4m3_to_float), the fp32 product with
// formats::ue8m0_to_float (exact: 4 significant bits, magnitude 0 or >= 2^-136; Inf from 2^128
// on), one round to nearest even to bf16 (exact from 2^-130 up; subnormals kept: the library is
// built without -ftz). NaN codes and scales give NaN.
//
// Every row of a is converted, not only those of the experts: the BF16 GEMM's TMA reads whole
// 128-row tiles from each expert's first row, so rows past offsets[E] (up to M_cap; beyond it TMA
// fills zeros) and rows of neighbouring experts are read too. They only feed output rows that
// are never written, but converting them keeps every byte the GEMM reads defined (and the cost
// is that of (M_cap - rows) · K · 3 bytes: M_cap is the rows' capacity, normally close to them).
#include "cuda/gemm/fp8/mxfp8_emulation.h"

#include <cuda_bf16.h>

#include <algorithm>
#include <cstddef>

#include "cuda/check.h"
#include "cuda/packed_values.cuh"
#include "cuda/quant/vec16.cuh"
#include "cuda/router/checks.h"
#include "cuda/sm_count.h"
#include "formats/ue8m0.h"

namespace moefuse::gemm::fp8 {
namespace {

inline constexpr int kThreads = 256;
inline constexpr int kWarps = kThreads / 32;
inline constexpr int kBlockRows = 32;
// Six CTAs an SM (1536 threads, 40 registers each): at the grid's eight ptxas kept one value in
// local memory; six keep 8 loads of 8 bytes in flight a lane, ~96 KB an SM, enough for HBM.
inline constexpr int kCtasPerSm = 6;
inline constexpr int kRowsPerWarp = kBlockRows / kWarps;
inline constexpr int kBlockGroups = 16;  // 512 of K
inline constexpr int kLaneCodes = 8;      // a lane's codes in each half: one 8-byte load
inline constexpr int kHalfCols = 32 * kLaneCodes;
static_assert(kBlockGroups * kMxfp8ScaleGroup == 2 * kHalfCols, "two halves cover a block's K");

struct DequantParams {
  const uint8_t* codes;   // [rows, k] e4m3
  const uint8_t* scales;  // [rows / batch_rows, k / 32, pitch] e8m0
  __nv_bfloat16* out;     // [rows, k]
  int64_t rows, k, batch_rows, pitch;
  int64_t groups;    // k / 32
  int64_t k_blocks;  // ceil(groups / kBlockGroups)
  int64_t blocks;    // ceil(rows / kBlockRows) · k_blocks
};

// 8 codes times `scale` as bf16, one 16-byte store.
__device__ __forceinline__ void store_bf16x8(__nv_bfloat16* out, const uint2& codes, float scale) {
  float v[8];
  float f[4];
  cuda::quant::e4m3x4_to_float(codes.x, f);
#pragma unroll
  for (int j = 0; j < 4; ++j) v[j] = f[j] * scale;
  cuda::quant::e4m3x4_to_float(codes.y, f);
#pragma unroll
  for (int j = 0; j < 4; ++j) v[4 + j] = f[j] * scale;
  *reinterpret_cast<uint4*>(out) = cuda::pack_bf16x8(v);
}

__global__ void __launch_bounds__(kThreads, kCtasPerSm)
    mxfp8_to_bf16_kernel(DequantParams p) {
  __shared__ uint8_t block_scales[kBlockGroups][kBlockRows];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  for (int64_t block = blockIdx.x; block < p.blocks; block += gridDim.x) {
    const int64_t row0 = block / p.k_blocks * kBlockRows;
    const int64_t g0 = block % p.k_blocks * kBlockGroups;
    // Scales: thread t loads groups t / 32 and t / 32 + 8 of row row0 + t % 32 (each row on its
    // own, so a block may straddle two batches of b).
    const int r = threadIdx.x % kBlockRows;
    const int64_t row = row0 + r;
#pragma unroll
    for (int u = 0; u < 2; ++u) {
      const int64_t g = g0 + threadIdx.x / kBlockRows + u * kWarps;
      if (row < p.rows && g < p.groups)
        block_scales[g - g0][r] = __ldg(p.scales + row / p.batch_rows * p.groups * p.pitch +
                                        g * p.pitch + row % p.batch_rows);
    }
    __syncthreads();
    // This lane's first element in each half of the block's 512 columns.
    const int64_t col0 = g0 * kMxfp8ScaleGroup + lane * kLaneCodes;
    uint2 c[kRowsPerWarp][2];
#pragma unroll
    for (int i = 0; i < kRowsPerWarp; ++i) {
      const int64_t rr = row0 + warp * kRowsPerWarp + i;
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int64_t col = col0 + h * kHalfCols;
        c[i][h] = rr < p.rows && col < p.k
                      ? __ldg(reinterpret_cast<const uint2*>(p.codes + rr * p.k + col))
                      : uint2{};
      }
    }
#pragma unroll
    for (int i = 0; i < kRowsPerWarp; ++i) {
      const int local = warp * kRowsPerWarp + i;
      const int64_t rr = row0 + local;
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int64_t col = col0 + h * kHalfCols;
        // K % 32 == 0: a lane's 8 columns lie wholly inside K or wholly past it.
        if (rr < p.rows && col < p.k)
          store_bf16x8(p.out + rr * p.k + col, c[i][h],
                       formats::ue8m0_to_float(block_scales[h * 8 + lane / 4][local]));
      }
    }
    __syncthreads();  // the next block's scales overwrite these
  }
}

}  // namespace

void dequantize_mxfp8_kmajor_bf16(const TensorView& codes, const TensorView& scales,
                                  const TensorView& out, int64_t batch_rows, int64_t pitch,
                                  cudaStream_t stream) {
  const int64_t k = codes.size(codes.rank - 1), rows = codes.numel() / k;
  if (rows == 0) return;
  const int64_t groups = k / kMxfp8ScaleGroup;
  const int64_t k_blocks = (groups + kBlockGroups - 1) / kBlockGroups;
  const DequantParams p{.codes = codes.as<const uint8_t>(),
                        .scales = scales.as<const uint8_t>(),
                        .out = out.as<__nv_bfloat16>(),
                        .rows = rows,
                        .k = k,
                        .batch_rows = batch_rows,
                        .pitch = pitch,
                        .groups = groups,
                        .k_blocks = k_blocks,
                        .blocks = (rows + kBlockRows - 1) / kBlockRows * k_blocks};
  // One wave of resident CTAs (grid-stride): a grid of 8 an SM would leave a second wave of 2 an
  // SM, with a third of the loads in flight, for the last quarter of the work.
  const auto ctas = static_cast<unsigned>(
      std::min<int64_t>(p.blocks, int64_t{cuda::device_sm_count()} * kCtasPerSm));
  mxfp8_to_bf16_kernel<<<ctas, kThreads, 0, stream>>>(p);
  MOEFUSE_CUDA_CHECK_LAUNCH();
}

Mxfp8Workspace mxfp8_workspace(int64_t m_cap, int64_t experts, int64_t n, int64_t k) {
  const size_t bf16 = sizeof(__nv_bfloat16);
  const size_t a_bytes = cuda::align_bytes(bf16 * static_cast<size_t>(m_cap * k));
  return {.b_offset = a_bytes,
          .bytes = a_bytes + cuda::align_bytes(bf16 * static_cast<size_t>(experts * n * k))};
}

GroupedGemmArgs mxfp8_bf16_gemm_args(const GroupedGemmFp8Args& args) {
  const int64_t m_cap = args.a.size(0), e = args.b.size(0), n = args.b.size(1),
                k = args.b.size(2);
  auto* base = static_cast<std::byte*>(args.workspace.data);
  return {.a = TensorView::contiguous(base, DType::kBFloat16, {m_cap, k}, Device::kCuda),
          .b = TensorView::contiguous(base + mxfp8_workspace(m_cap, e, n, k).b_offset,
                                      DType::kBFloat16, {e, n, k}, Device::kCuda),
          .offsets = args.offsets,
          .d = args.d,
          .epilogue = args.epilogue,
          .activation = args.activation,
          .clamped_swiglu = args.clamped_swiglu,
          .bias = args.bias,
          .row_scale = args.row_scale,
          .pre_activation = args.pre_activation};
}

void launch_mxfp8_dequantize(const GroupedGemmFp8Args& args, cudaStream_t stream) {
  const GroupedGemmArgs bf16 = mxfp8_bf16_gemm_args(args);
  const int64_t m_cap = args.a.size(0), n = args.b.size(1);
  dequantize_mxfp8_kmajor_bf16(args.a, args.a_scales, bf16.a, m_cap, mxfp8_scale_rows(m_cap),
                               stream);
  dequantize_mxfp8_kmajor_bf16(args.b, args.b_scales, bf16.b, n, n, stream);
}

}  // namespace moefuse::gemm::fp8
