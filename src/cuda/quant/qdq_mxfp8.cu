// MXFP8 quantise-dequantise (moefuse/quant.h qdq_mxfp8_rows / qdq_mxfp8_cols): each 32-element
// block's amax, its UE8M0 scale, and its values through E4M3 and back to bf16, all in registers:
// one read and one write of x, no codes or scales stored.
//
// Rows: x is a flat array of 16-byte vectors of 8 bf16, and a block is 4 consecutive vectors
// (K % 32 == 0), held by 4 adjacent lanes whose amax two xor-shuffles combine. Grid-stride over
// the vectors, kRowVectors a thread in flight (each warp load reads 512 contiguous bytes), all
// loads issued before any arithmetic.
//
// Columns: the walk of column_blocks.cuh, one 32-row block x 4 columns a lane (8-byte loads:
// each warp instruction reads 256 contiguous bytes of a row). The lane holds the 32 x 8 bytes, so
// the four column amaxes are taken in the lane, then it writes the 32 converted rows.
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
#include "cuda/packed_values.cuh"
#include "cuda/quant/column_blocks.cuh"
#include "cuda/quant/mx_block.cuh"
#include "cuda/quant/qdq_validate.h"
#include "cuda/quant/validate.h"
#include "cuda/quant/vec16.cuh"
#include "cuda/sm_count.h"
#include "formats/recipes.h"
#include "moefuse/quant.h"

namespace moefuse::cuda::quant {
namespace {

inline constexpr int kThreads = 256;
inline constexpr int kBlock = formats::kMxBlock;
inline constexpr int kBlockLanes = kBlock / 8;  // rows: lanes of 8 bf16 in a block
inline constexpr int kRowVectors = 4;           // rows: 64 bytes of x in flight a thread
// Five CTAs an SM (48 registers a thread; at six ptxas spills) keep 80 KB of loads in flight an
// SM, plenty for HBM (two vectors at eight CTAs measured the same).
inline constexpr int kRowsCtasPerSm = 5;

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

// Columns 4q .. 4q + 3 of one block: 32 8-byte loads, the four amaxes, 32 stores.
struct QdqColumns {
  const uint2* x;  // [rows, quads]: 4 bf16 in 8 bytes
  uint2* out;      // the same shape, may be x
  int quads;

  __device__ __forceinline__ void operator()(const BlockRows& b, int /*g*/, int q) const {
    if (q >= quads) return;  // N % 8 == 0: a lane's 4 columns are inside N or past it
    const int64_t at = int64_t{b.first} * quads + q;
    uint2 w[kColumnBlock];
    MxScale s[4];
    load_column_block<false>(x + at, quads, b.rows, w, s);  // x may be out: plain loads
    uint2* dst = out + at;
#pragma unroll
    for (int r = 0; r < kColumnBlock; r += 2, dst += 2 * int64_t{quads}) {
      const uint4 v = qdq_bf16x8(make_uint4(w[r].x, w[r].y, w[r + 1].x, w[r + 1].y), s);
      if (r < b.rows) __stcs(dst, make_uint2(v.x, v.y));
      if (r + 1 < b.rows) __stcs(dst + quads, make_uint2(v.z, v.w));
    }
  }
};

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
  const ColumnWalk w = column_walk(x, offsets, experts);
  launch_column_blocks(w, QdqColumns{x.as<const uint2>(), out.as<uint2>(), w.quads}, stream);
}

}  // namespace moefuse
