// Column-wise grouped FP8 quantisation (moefuse/grouped_gemm_fp8_wgrad.h): x [M_cap, N] bf16 →
// xt [N, 128 G] e4m3 + scales [G, N] fp32, one 128-row group of one expert per scale.
//
// The gather form reads row r of the operand from x[gather_index[r]] (zeros where the index is
// outside [0, rows of x)): dW1's x operand straight from the tokens, without a permuted copy.
//
// Mapping: CTA b owns column block b % nb (the 128 columns n0 = 128 (b % nb) .. of x) of global
// group b / nb (its expert and rows from colwise_groups.h), so that consecutive CTAs read
// adjacent pieces of the same rows. Its 256 threads
//   1. compute group_start[E + 1] (warp 0, the GEMM's scan), find the group, and note the source
//      row of each of its 128 rows in shared memory (-1: zeros);
//   2. load the 128 × 128 bf16 block with 16-byte loads, 8 per thread all in flight (rows past
//      the group's end and columns past N read as zeros), and store it into shared memory, word
//      w of row r at w ^ 8·(r / 16 % 4) (the swizzle that step 3's reads need);
//   3. transpose through shared memory: thread (cp = t / 4, q = t % 4) reads the column pair
//      2cp, 2cp + 1 of rows 64h + 16q + i (h < 2, i < 16) — a warp's 8 pairs × 4 quarters hit
//      32 distinct banks — takes the pair's amax over its 32 rows, and the quad (the 4 quarters,
//      adjacent lanes) combines them with two xor-shuffles;
//   4. reads its 2 × 32 values again, 16 rows at a time (holding all 32 would cost the registers
//      of a fourth CTA an SM), quantises them with the 1x128 recipe (formats::blockwise_scale, the
//      hardware E4M3 conversion of cuda/quant/vec16.cuh, bit-exact with the reference) and
//      stores each column's codes as two 16-byte stores, rows 16q.. and 64 + 16q.. of xt's
//      128-byte group segment: the quad's stores fill whole 32-byte sectors. ncu (run 21) had
//      the first version (quarters of 32 contiguous rows, one warp per quarter) L2-bound at 78%
//      with its stores using 16 of each sector's 32 bytes. Quarter 0 stores the pair's scales.
//      Padding rows (the group's tail up to 128) are zeros, so they encode as 0x00.
//
// The row-wise form (quantize_fp8_rowcol_grouped) also writes the rows' 1x128 codes in step 2:
// the 16 lanes that loaded a row's 128 columns (adjacent, 8 bf16 each) read their vectors back
// from shared memory (the words each copied itself: no barrier), reduce the row's amax by
// shuffles, and store 8 codes each with the scale one lane computed; the row's scale goes to the
// GEMM's K-major layout. One read of x then serves both copies (d_pre's: the FC1 dgrad's and
// dW1's), where two passes read it twice. This form loads its block by cp.async straight into
// shared memory: no registers hold the loads, so five CTAs run on an SM (0.84 → 0.89 of copy
// bandwidth, docs/fp8.md). The column-only forms keep their register loads: by cp.async they
// slowed the FP8 wgrad that follows them on gpt-oss (docs/fp8.md, "Why the column-only
// quantisers do not load by cp.async"); this form runs before the FC1 dgrad, which it did not.
#include <cuda_bf16.h>

#include <cstdint>

#include "cuda/check.h"
#include "cuda/device.h"
#include "cuda/gemm/common/cp_async.cuh"
#include "cuda/gemm/device_scheduler.cuh"
#include "cuda/gemm/fp8/colwise_groups.h"
#include "cuda/quant/vec16.cuh"
#include "formats/recipes.h"
#include "moefuse/grouped_gemm_fp8_wgrad.h"

namespace moefuse::gemm::fp8 {
namespace {

inline constexpr int kThreads = 256;
inline constexpr int kCols = 128;                           // columns of x per CTA
inline constexpr int kWords = kCols / 2;                    // bf16 pairs in a block row
inline constexpr int kVectors = kColwiseGroup * kCols / 8;  // 16-byte bf16 vectors per block
inline constexpr int kLoadsPerThread = kVectors / kThreads;
inline constexpr int kQuarters = kThreads / kWords;  // threads per column pair
inline constexpr int kRun = 16;                      // rows per 16-byte code store
inline constexpr int kRowsPerThread = kColwiseGroup / kQuarters;
static_assert(kLoadsPerThread * kThreads == kVectors && kQuarters == 4 && kRowsPerThread == 32);

struct ColwiseQuantParams {
  const __nv_bfloat16* x;   // [x_rows, n]: the operand's rows, or the gather's source
  const int* gather_index;  // [m_cap] or null: row r of the operand is x[gather_index[r]]
  const int* offsets;       // [num_experts + 1]
  uint8_t* xt;              // [n, 128 · groups]
  float* scales;            // [groups, n]
  uint8_t* q_rows;          // row-wise form: [m_cap, n] e4m3
  float* q_rows_scales;     // row-wise form: [ceil(n / 128), scale_cols] K-major
  int x_rows, m_cap, n, num_experts, groups, column_blocks, scale_cols;
};

__device__ __forceinline__ float bf16_low(uint32_t w) { return formats::bits_float(w << 16); }
__device__ __forceinline__ float bf16_high(uint32_t w) {
  return formats::bits_float(w & 0xFFFF0000u);
}

// The word swizzle of block row r: quarters 16 rows apart land on different banks in step 3.
__device__ __forceinline__ int word_swizzle(int r) { return 8 * ((r / kRun) % kQuarters); }

// max |x| over the 8 bf16 of v, NaN ignored, +0 for all-zero or all-NaN: cuda::quant::amax16's
// value (max picks one of its inputs exactly), by packed bf16 max, which returns the other input
// where one is NaN.
__device__ __forceinline__ float amax8(uint4 v) {
  auto abs2 = [](uint32_t w) { return __habs2(*reinterpret_cast<const __nv_bfloat162*>(&w)); };
  const __nv_bfloat162 m =
      __hmax2(__hmax2(abs2(v.x), abs2(v.y)), __hmax2(abs2(v.z), abs2(v.w)));
  return fmaxf(fmaxf(0.0f, __low2float(m)), __high2float(m));
}

// Row-wise form: the 1x128 codes and scales of the group rows this warp loaded, from `block`.
// Load u of lane l held columns 8 (l % 16) .. of block row 2 w + l / 16 + 16 u (w: the warp), so a
// warp holds 16 rows, two a load: vector t + 256 u of its thread t (block_row, block_word below),
// so each lane reads back only what it copied itself. Pass 1 reduces each row's amax over its 16
// lanes and parks it in lane 2u + l / 16; those 16 lanes compute the scales (one division
// sequence a warp, not one a load); pass 2 reads the vectors again and stores their codes. Rows
// outside the group (or M_cap) and columns past N write nothing.
__device__ __forceinline__ void quantize_loaded_rows(const uint32_t (&block)[kColwiseGroup][kWords],
                                                     const ColwiseGroup& grp, int n0,
                                                     const ColwiseQuantParams& p) {
  constexpr int kLanesPerRow = kCols / 8;
  constexpr unsigned kAll = 0xffffffffu;
  const int lane = threadIdx.x % 32, half = lane / kLanesPerRow, chunk = lane % kLanesPerRow;
  const int first = 2 * (threadIdx.x / 32) + half;  // this lane's row at load 0
  auto vector = [&](int u) {
    const int r = first + 16 * u;
    return *reinterpret_cast<const uint4*>(&block[r][(chunk * 4) ^ word_swizzle(r)]);
  };
  float row_amax = 0.0f;  // lane l < 16: the amax of row 2w + l % 2 + 16 (l / 2)
#pragma unroll
  for (int u = 0; u < kLoadsPerThread; ++u) {
    const float a = cuda::quant::group_max<kLanesPerRow>(amax8(vector(u)));
    const float second = __shfl_down_sync(kAll, a, kLanesPerRow - 1);  // lane l: lane l + 15's
    if (lane == 2 * u) row_amax = a;
    if (lane == 2 * u + 1) row_amax = second;
  }
  const formats::BlockwiseScale own = formats::blockwise_scale(row_amax);
  const int own_r = 2 * (threadIdx.x / 32) + lane % 2 + 16 * (lane / 2);
  const int64_t own_row = int64_t{grp.first_row} + own_r;
  if (lane < 2 * kLoadsPerThread && own_r < grp.rows && own_row < p.m_cap)
    p.q_rows_scales[int64_t{n0 / kCols} * p.scale_cols + own_row] = own.scale;
#pragma unroll
  for (int u = 0; u < kLoadsPerThread; ++u) {
    const float multiplier = __shfl_sync(kAll, own.multiplier, 2 * u + half);
    const int r = first + 16 * u, c = n0 + chunk * 8;
    const int64_t row = int64_t{grp.first_row} + r;
    if (r >= grp.rows || row >= p.m_cap || c >= p.n) continue;
    cuda::quant::store8_e4m3(p.q_rows + row * p.n + c, cuda::quant::raw16_of(vector(u)),
                             multiplier);
  }
}

// Vector i of the block (i = t + 256 u for thread t): block row i / 16, columns n0 + 8 (i % 16)..,
// stored at word `block_word(i)` of its row.
__device__ __forceinline__ int block_row(int i) { return i / (kCols / 8); }
__device__ __forceinline__ int block_word(int i) {
  return ((i % (kCols / 8)) * 4) ^ word_swizzle(block_row(i));
}

// Where vector i comes from; null for rows outside the group and columns past N (zeros).
__device__ __forceinline__ const uint4* block_source(int i, const int* source_row, int n0,
                                                     const ColwiseQuantParams& p) {
  const int src = source_row[block_row(i)], c = n0 + (i % (kCols / 8)) * 8;
  return src >= 0 && c < p.n
             ? reinterpret_cast<const uint4*>(p.x + static_cast<int64_t>(src) * p.n + c)
             : nullptr;
}

// The block by 16-byte register loads, all 8 of a thread in flight, then stored.
__device__ __forceinline__ void load_block(uint32_t (&block)[kColwiseGroup][kWords],
                                           const int* source_row, int n0,
                                           const ColwiseQuantParams& p) {
  uint4 v[kLoadsPerThread];
#pragma unroll
  for (int u = 0; u < kLoadsPerThread; ++u) {
    const uint4* from = block_source(threadIdx.x + kThreads * u, source_row, n0, p);
    v[u] = from ? __ldg(from) : make_uint4(0, 0, 0, 0);
  }
#pragma unroll
  for (int u = 0; u < kLoadsPerThread; ++u) {
    const int i = threadIdx.x + kThreads * u;
    *reinterpret_cast<uint4*>(&block[block_row(i)][block_word(i)]) = v[u];
  }
}

// The block by cp.async (zeros by a source size of 0); on return this thread's copies are visible
// to it, the others' after a barrier.
__device__ __forceinline__ void load_block_async(uint32_t (&block)[kColwiseGroup][kWords],
                                                 const int* source_row, int n0,
                                                 const ColwiseQuantParams& p) {
#pragma unroll
  for (int u = 0; u < kLoadsPerThread; ++u) {
    const int i = threadIdx.x + kThreads * u;
    const uint4* from = block_source(i, source_row, n0, p);
    cp_async_16(&block[block_row(i)][block_word(i)], from ? static_cast<const void*>(from) : p.x,
                from ? 16 : 0);
  }
  cp_async_commit();
  cp_async_wait<0>();
}

// Five CTAs an SM for the row-wise form (cp.async holds no registers), four for the others.
template <bool kRowwise>
__global__ void __launch_bounds__(kThreads, kRowwise ? 5 : 4)
    colwise_quantize_kernel(const ColwiseQuantParams p) {
  __shared__ alignas(16) uint32_t block[kColwiseGroup][kWords];  // bf16 pairs
  __shared__ int group_start[kGroupedGemmMaxExperts + 1];
  __shared__ int source_row[kColwiseGroup];  // x's row of each group row, -1: zeros
  if (threadIdx.x < 32)
    warp_tile_starts(p.offsets, p.num_experts, colwise_group_shape(), group_start);
  __syncthreads();
  const int g = blockIdx.x / p.column_blocks;
  if (g >= min(group_start[p.num_experts], p.groups)) return;  // uniform over the CTA
  const ColwiseGroup grp = colwise_group(g, p.offsets, group_start, p.num_experts);
  const int n0 = (blockIdx.x % p.column_blocks) * kCols;
  if (threadIdx.x < kColwiseGroup) {
    const int r = threadIdx.x, row = grp.first_row + r;
    int src = r < grp.rows && row >= 0 && row < p.m_cap ? row : -1;
    if (src >= 0 && p.gather_index) src = __ldg(p.gather_index + row);
    source_row[r] = src < p.x_rows ? src : -1;  // a negative index stays negative
  }
  __syncthreads();

  if constexpr (kRowwise) {
    load_block_async(block, source_row, n0, p);
    quantize_loaded_rows(block, grp, n0, p);  // reads only this thread's own copies
  } else {
    load_block(block, source_row, n0, p);
  }
  __syncthreads();

  const int cp = threadIdx.x / kQuarters, q = threadIdx.x % kQuarters;
  const int word = cp ^ (8 * q);  // word_swizzle of every row this thread reads
  // Row i of this thread's 32: 16-row run i / 16, row i % 16 of it.
  auto pair_at = [&](int i) {
    return block[(i / kRun) * (kColwiseGroup / 2) + q * kRun + i % kRun][word];
  };
  float amax0 = 0.0f, amax1 = 0.0f;  // fmaxf skips NaN, as formats::amax_bits
#pragma unroll
  for (int i = 0; i < kRowsPerThread; ++i) {
    const uint32_t w = pair_at(i);
    amax0 = fmaxf(amax0, fabsf(bf16_low(w)));
    amax1 = fmaxf(amax1, fabsf(bf16_high(w)));
  }
#pragma unroll
  for (int lane_xor = 1; lane_xor < kQuarters; lane_xor *= 2) {
    amax0 = fmaxf(amax0, __shfl_xor_sync(0xffffffffu, amax0, lane_xor));
    amax1 = fmaxf(amax1, __shfl_xor_sync(0xffffffffu, amax1, lane_xor));
  }
  const int col = n0 + 2 * cp;
  if (col >= p.n) return;  // N % 8 == 0: a pair is entirely in or out
  const formats::BlockwiseScale s0 = formats::blockwise_scale(amax0);
  const formats::BlockwiseScale s1 = formats::blockwise_scale(amax1);
  if (q == 0)
    *reinterpret_cast<float2*>(p.scales + static_cast<int64_t>(g) * p.n + col) =
        make_float2(s0.scale, s1.scale);
  const int64_t pitch = int64_t{p.groups} * kColwiseGroup;
  uint8_t* out0 = p.xt + col * pitch + int64_t{g} * kColwiseGroup + q * kRun;
#pragma unroll
  for (int h = 0; h < kRowsPerThread / kRun; ++h) {  // a 16-row run: re-read, quantise, store
    uint32_t c0[kRun / 4], c1[kRun / 4];
#pragma unroll
    for (int k = 0; k < kRun / 4; ++k) {
      uint32_t x4[4];
#pragma unroll
      for (int j = 0; j < 4; ++j) x4[j] = pair_at(h * kRun + 4 * k + j);
      c0[k] = cuda::quant::e4m3x4(bf16_low(x4[0]) * s0.multiplier, bf16_low(x4[1]) * s0.multiplier,
                                  bf16_low(x4[2]) * s0.multiplier, bf16_low(x4[3]) * s0.multiplier);
      c1[k] = cuda::quant::e4m3x4(bf16_high(x4[0]) * s1.multiplier,
                                  bf16_high(x4[1]) * s1.multiplier,
                                  bf16_high(x4[2]) * s1.multiplier,
                                  bf16_high(x4[3]) * s1.multiplier);
    }
    const int offset = h * (kColwiseGroup / 2);
    *reinterpret_cast<uint4*>(out0 + offset) = make_uint4(c0[0], c0[1], c0[2], c0[3]);
    *reinterpret_cast<uint4*>(out0 + pitch + offset) = make_uint4(c1[0], c1[1], c1[2], c1[3]);
  }
}

}  // namespace
}  // namespace moefuse::gemm::fp8

namespace moefuse {

namespace {

// Every form: gather_index is null for the plain one, q_rows (and q_rows_scales) null without
// the row-wise copy. Validated by the caller.
void launch_colwise(const TensorView& x, const TensorView* gather_index,
                    const TensorView& offsets, const TensorView& xt, const TensorView& scales,
                    const TensorView* q_rows, const TensorView* q_rows_scales,
                    cudaStream_t stream) {
  cuda::expect_launchable(stream);
  const int groups = static_cast<int>(scales.size(0)), n = static_cast<int>(x.size(1));
  const int64_t m_cap = gather_index ? gather_index->size(0) : x.size(0);
  if (groups == 0 || m_cap == 0) return;  // no row can have a group
  const gemm::fp8::ColwiseQuantParams p{
      .x = x.as<const __nv_bfloat16>(),
      .gather_index = gather_index ? gather_index->as<const int>() : nullptr,
      .offsets = offsets.as<const int>(),
      .xt = xt.as<uint8_t>(),
      .scales = scales.as<float>(),
      .q_rows = q_rows ? q_rows->as<uint8_t>() : nullptr,
      .q_rows_scales = q_rows_scales ? q_rows_scales->as<float>() : nullptr,
      .x_rows = static_cast<int>(x.size(0)),
      .m_cap = static_cast<int>(m_cap),
      .n = n,
      .num_experts = static_cast<int>(offsets.size(0) - 1),
      .groups = groups,
      .column_blocks = gemm::ceil_div(n, gemm::fp8::kCols),
      .scale_cols = q_rows_scales ? static_cast<int>(q_rows_scales->size(1)) : 0};
  const auto blocks = static_cast<unsigned>(int64_t{groups} * p.column_blocks);
  if (q_rows)
    gemm::fp8::colwise_quantize_kernel<true><<<blocks, gemm::fp8::kThreads, 0, stream>>>(p);
  else
    gemm::fp8::colwise_quantize_kernel<false><<<blocks, gemm::fp8::kThreads, 0, stream>>>(p);
  MOEFUSE_CUDA_CHECK_LAUNCH();
}

}  // namespace

void quantize_fp8_colwise_grouped(const TensorView& x, const TensorView& offsets,
                                  const TensorView& xt, const TensorView& scales,
                                  cudaStream_t stream) {
  validate_quantize_fp8_colwise_grouped(x, offsets, xt, scales);
  launch_colwise(x, nullptr, offsets, xt, scales, nullptr, nullptr, stream);
}

void quantize_fp8_colwise_grouped_gather(const TensorView& x, const TensorView& gather_index,
                                         const TensorView& offsets, const TensorView& xt,
                                         const TensorView& scales, cudaStream_t stream) {
  validate_quantize_fp8_colwise_grouped(x, offsets, xt, scales, Device::kCuda, DType::kBFloat16,
                                        &gather_index);
  launch_colwise(x, &gather_index, offsets, xt, scales, nullptr, nullptr, stream);
}

void quantize_fp8_rowcol_grouped(const TensorView& x, const TensorView& offsets,
                                 const TensorView& xt, const TensorView& scales,
                                 const TensorView& q_rows, const TensorView& q_rows_scales,
                                 cudaStream_t stream) {
  validate_quantize_fp8_rowcol_grouped(x, offsets, xt, scales, q_rows, q_rows_scales);
  launch_colwise(x, nullptr, offsets, xt, scales, &q_rows, &q_rows_scales, stream);
}

}  // namespace moefuse
