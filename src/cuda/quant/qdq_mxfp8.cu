// MXFP8 quantise-dequantise (moefuse/quant.h qdq_mxfp8_rows / qdq_mxfp8_cols): each 32-element
// block's amax, its UE8M0 scale, and its values through E4M3 and back to bf16, all in registers:
// one read and one write of x, no codes or scales stored.
//
// Rows: x is a flat array of 16-byte vectors of 8 bf16, and a block is 4 consecutive vectors
// (K % 32 == 0), held by 4 adjacent lanes whose amax two xor-shuffles combine. Grid-stride over
// the vectors, kRowVectors a thread in flight (each warp load reads 512 contiguous bytes), all
// loads issued before any arithmetic.
//
// Columns: a warp takes one 32-row block x 128 columns: lane l columns 4l .. 4l + 3 in each of
// the block's 32 rows (8-byte loads: each warp instruction reads 256 contiguous bytes of a row).
// It holds the 32 x 8 bytes, so the four column amaxes are taken in the lane, then writes the 32
// converted rows. Work items are (block, 128-column tile), tiles fastest, so that a CTA's warps
// read adjacent pieces of the same rows; warps grid-stride over them. With offsets the blocks
// restart at each expert's first row; their count G = sum_e ceil(m_e / 32) exists only on the
// device: each CTA copies the offsets to shared memory, takes the block starts with the tile
// scheduler's prefix (warp_tile_starts, 32-row tiles) and finds a block's expert with
// find_expert. The host sizes the grid from the bound ceil(M / 32) + E; the warps loop over the G
// that the device found.
//
// Measured on an H200 (moefuse-bench quant, medians, x of 64 to 270 MB, against a D2D copy of the
// same bytes): rows 0.87-0.90 of copy, columns 0.88-0.92. Streaming stores (st.global.cs) gave
// the rows +0.04 and the columns +0.02; 4-byte column lanes (64 registers, four CTAs an SM)
// reached only 0.80-0.84; streaming loads changed nothing measurable.
//
// Exact, bit for bit, against the reference (src/ref/quant.cpp) rounded to bf16: the same fp32
// operations in the same order. The amax is fmaxf over |x| (bf16 -> fp32 exact; fmaxf skips NaN
// as formats::amax_bits), code = formats::mx_scale_code(amax), each x times
// formats::ue8m0_reciprocal(code), the hardware E4M3 conversion (vec16.cuh e4m3x4 =
// formats::e4m3_from_float on every float) and decode (e4m3x4_to_float = e4m3_to_float), times
// formats::ue8m0_to_float(code), one cvt.rn to bf16 (ref::bf16_bits but for NaN payloads;
// subnormals kept: the library is built without -ftz). No product feeds an add, so nothing can be
// contracted into an FMA.
#include <cuda_bf16.h>

#include <algorithm>
#include <cstdint>

#include "cuda/check.h"
#include "cuda/device.h"
#include "cuda/gemm/device_scheduler.cuh"
#include "cuda/packed_values.cuh"
#include "cuda/quant/qdq_validate.h"
#include "cuda/quant/validate.h"
#include "cuda/quant/vec16.cuh"
#include "cuda/sm_count.h"
#include "formats/recipes.h"
#include "moefuse/grouped_gemm.h"
#include "moefuse/quant.h"

namespace moefuse::cuda::quant {
namespace {

inline constexpr int kThreads = 256;
inline constexpr int kWarps = kThreads / 32;
inline constexpr int kBlock = formats::kMxBlock;
inline constexpr int kBlockLanes = kBlock / 8;  // rows: lanes of 8 bf16 in a block
inline constexpr int kRowVectors = 4;           // rows: 64 bytes of x in flight a thread
// Five CTAs an SM (48 registers a thread; at six ptxas spills) keep 80 KB of loads in flight an
// SM, plenty for HBM (two vectors at eight CTAs measured the same).
inline constexpr int kRowsCtasPerSm = 5;
inline constexpr int kTileQuads = 32;  // columns: a warp's groups of 4 columns, one a lane
// Columns: a lane holds 32 x 8 bytes (96 registers); two CTAs an SM keep 128 KB in flight an SM
// (at three ptxas spills).
inline constexpr int kColsCtasPerSm = 2;
inline constexpr int kMaxExperts = static_cast<int>(kGroupedGemmMaxExperts);

// The multiplier applied before the E4M3 rounding and the scale applied after, of a block amax.
struct MxScale {
  float multiplier, scale;
};

__device__ __forceinline__ MxScale mx_scale(float amax) {
  const uint8_t code = formats::mx_scale_code(amax);
  return {formats::ue8m0_reciprocal(code), formats::ue8m0_to_float(code)};
}

__device__ __forceinline__ float low_bf16(uint32_t w) { return formats::bits_float(w << 16); }
__device__ __forceinline__ float high_bf16(uint32_t w) {
  return formats::bits_float(w & 0xFFFF0000u);
}

// The 8 bf16 of v (element 2i in the low half of word i) through E4M3 and back, element i with
// the scale s[i % 4]: the rows pass gives its block's scale four times, the columns pass the
// scales of the 4 columns a lane holds in each of two rows.
__device__ __forceinline__ uint4 qdq_bf16x8(const uint4& v, const MxScale (&s)[4]) {
  const uint32_t w[4] = {v.x, v.y, v.z, v.w};
  float out[8];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const uint32_t a = w[2 * h], b = w[2 * h + 1];
    float f[4];
    e4m3x4_to_float(e4m3x4(low_bf16(a) * s[0].multiplier, high_bf16(a) * s[1].multiplier,
                           low_bf16(b) * s[2].multiplier, high_bf16(b) * s[3].multiplier),
                    f);
#pragma unroll
    for (int j = 0; j < 4; ++j) out[4 * h + j] = f[j] * s[j].scale;
  }
  return cuda::pack_bf16x8(out);
}

// x and out may be the same buffer: plain loads (not the read-only path), each element read and
// then written by the same thread. Both kernels store with st.global.cs (streaming: nothing here
// reads the output again).
__global__ void __launch_bounds__(kThreads, kRowsCtasPerSm)
    qdq_rows_kernel(const uint4* x, uint4* out, int64_t vectors) {
  const int lane = threadIdx.x % 32;
  const int64_t stride = int64_t{gridDim.x} * kThreads;
  // The warp's first vector drives the loop, so every lane of a warp runs the shuffles together;
  // vectors % 4 == 0, so a block's 4 lanes are all inside or all past the end.
  for (int64_t base = blockIdx.x * int64_t{kThreads} + (threadIdx.x - lane); base < vectors;
       base += stride * kRowVectors) {
    uint4 v[kRowVectors];
#pragma unroll
    for (int u = 0; u < kRowVectors; ++u) {
      const int64_t i = base + lane + u * stride;
      v[u] = i < vectors ? x[i] : uint4{};
    }
#pragma unroll
    for (int u = 0; u < kRowVectors; ++u) {
      const uint32_t w[4] = {v[u].x, v[u].y, v[u].z, v[u].w};
      float amax = 0.0f;
#pragma unroll
      for (int j = 0; j < 4; ++j)
        amax = fmaxf(fmaxf(amax, fabsf(low_bf16(w[j]))), fabsf(high_bf16(w[j])));
      const MxScale s = mx_scale(group_max<kBlockLanes>(amax));
      const int64_t i = base + lane + u * stride;
      if (i < vectors) __stcs(out + i, qdq_bf16x8(v[u], {s, s, s, s}));
    }
  }
}

struct ColsParams {
  const uint2* x;      // [rows, quads]: 4 bf16 in 8 bytes
  uint2* out;          // the same shape, may be x
  const int* offsets;  // [num_experts + 1], or null: blocks of 32 rows from row 0
  int rows, quads, num_experts, col_tiles;
};

// expert_tiles(rows, qdq_block_shape()) = ceil(rows / 32): the blocks of an expert. A function,
// so that device code can pass it by reference without a device-side variable.
__device__ constexpr gemm::TileShape qdq_block_shape() {
  return gemm::TileShape{.block_m = kBlock, .block_n = 1, .group_m = 1, .n_blocks = 1};
}

// The rows [first, first + rows) of block g. Offsets that break the contract (negative, past M,
// decreasing) are clipped to [0, M), so the pass stays inside x and out.
struct BlockRows {
  int first, rows;
};

__device__ __forceinline__ BlockRows block_rows(int g, const ColsParams& p, const int* offsets,
                                                const int* block_start) {
  if (!p.offsets) return {kBlock * g, kBlock};
  const int e = gemm::find_expert(block_start, p.num_experts, g);
  const int first = offsets[e] + kBlock * (g - block_start[e]);
  const int rows = min(kBlock, min(offsets[e + 1], p.rows) - first);
  return first < 0 || rows <= 0 ? BlockRows{0, 0} : BlockRows{first, rows};
}

// Columns 4q .. 4q + 3 of block b: 32 8-byte loads, the four amaxes, 32 stores.
__device__ __forceinline__ void qdq_column_quad(const ColsParams& p, const BlockRows& b, int q) {
  const bool inside = q < p.quads;  // N % 8 == 0: a lane's 4 columns are inside N or past it
  const int64_t at = int64_t{b.first} * p.quads + q;
  const int rows = inside ? b.rows : 0;
  uint2 w[kBlock];
  const uint2* src = p.x + at;
#pragma unroll
  for (int r = 0; r < kBlock; ++r, src += p.quads) w[r] = r < rows ? *src : uint2{};
  float amax[4] = {0.0f, 0.0f, 0.0f, 0.0f};  // rows past the block's end are zeros: no effect
#pragma unroll
  for (int r = 0; r < kBlock; ++r) {
    amax[0] = fmaxf(amax[0], fabsf(low_bf16(w[r].x)));
    amax[1] = fmaxf(amax[1], fabsf(high_bf16(w[r].x)));
    amax[2] = fmaxf(amax[2], fabsf(low_bf16(w[r].y)));
    amax[3] = fmaxf(amax[3], fabsf(high_bf16(w[r].y)));
  }
  const MxScale s[4] = {mx_scale(amax[0]), mx_scale(amax[1]), mx_scale(amax[2]),
                        mx_scale(amax[3])};
  uint2* dst = p.out + at;
#pragma unroll
  for (int r = 0; r < kBlock; r += 2, dst += 2 * int64_t{p.quads}) {
    const uint4 v = qdq_bf16x8(make_uint4(w[r].x, w[r].y, w[r + 1].x, w[r + 1].y), s);
    if (r < rows) __stcs(dst, make_uint2(v.x, v.y));
    if (r + 1 < rows) __stcs(dst + p.quads, make_uint2(v.z, v.w));
  }
}

__global__ void __launch_bounds__(kThreads, kColsCtasPerSm) qdq_cols_kernel(const ColsParams p) {
  __shared__ int offsets[kMaxExperts + 1];
  __shared__ int block_start[kMaxExperts + 1];
  int blocks = p.rows / kBlock;
  if (p.offsets) {
    for (int e = threadIdx.x; e <= p.num_experts; e += kThreads) offsets[e] = p.offsets[e];
    __syncthreads();
    if (threadIdx.x < 32)
      gemm::warp_tile_starts(offsets, p.num_experts, qdq_block_shape(), block_start);
    __syncthreads();
    blocks = block_start[p.num_experts];
  }
  // Warp w takes items w, w + warps, ... (item = g * col_tiles + tile), stepped without a
  // division per item.
  const int warps = gridDim.x * kWarps, warp = blockIdx.x * kWarps + threadIdx.x / 32;
  const int step_g = warps / p.col_tiles, step_tile = warps % p.col_tiles;
  for (int g = warp / p.col_tiles, tile = warp % p.col_tiles; g < blocks;) {
    qdq_column_quad(p, block_rows(g, p, offsets, block_start),
                    tile * kTileQuads + static_cast<int>(threadIdx.x % 32));
    g += step_g, tile += step_tile;
    if (tile >= p.col_tiles) tile -= p.col_tiles, ++g;
  }
}

}  // namespace
}  // namespace moefuse::cuda::quant

namespace moefuse {

void qdq_mxfp8_rows(const TensorView& x, const TensorView& out, cudaStream_t stream) {
  using namespace cuda::quant;
  auto [m, k] = validate_qdq_mxfp8_rows(x, out, DType::kBFloat16, Device::kCuda);
  cuda::expect_launchable(stream);
  const int64_t vectors = m * k / 8;
  if (vectors == 0) return;
  const auto ctas = static_cast<unsigned>(
      std::min(ceil_div(vectors, int64_t{kThreads} * kRowVectors),
               int64_t{cuda::device_sm_count()} * kRowsCtasPerSm));
  qdq_rows_kernel<<<ctas, kThreads, 0, stream>>>(x.as<const uint4>(), out.as<uint4>(), vectors);
  MOEFUSE_CUDA_CHECK_LAUNCH();
}

void qdq_mxfp8_cols(const TensorView& x, const TensorView& offsets, const TensorView& out,
                    cudaStream_t stream) {
  using namespace cuda::quant;
  const int64_t experts =
      validate_qdq_mxfp8_cols(x, offsets, out, DType::kBFloat16, Device::kCuda);
  cuda::expect_launchable(stream);
  const int64_t m = x.size(0), n = x.size(1);
  if (m == 0 || n == 0) return;
  const ColsParams p{.x = x.as<const uint2>(),
                     .out = out.as<uint2>(),
                     .offsets = experts > 0 ? offsets.as<const int>() : nullptr,
                     .rows = static_cast<int>(m),
                     .quads = static_cast<int>(n / 4),
                     .num_experts = static_cast<int>(experts),
                     .col_tiles = static_cast<int>(ceil_div(n / 4, kTileQuads))};
  // The device's block count is at most this: each expert adds at most one short block.
  const int64_t blocks = experts > 0 ? ceil_div(m, kBlock) + experts : m / kBlock;
  const auto ctas = static_cast<unsigned>(
      std::min(ceil_div(blocks * p.col_tiles, kWarps),
               int64_t{cuda::device_sm_count()} * kColsCtasPerSm));
  qdq_cols_kernel<<<ctas, kThreads, 0, stream>>>(p);
  MOEFUSE_CUDA_CHECK_LAUNCH();
}

}  // namespace moefuse
