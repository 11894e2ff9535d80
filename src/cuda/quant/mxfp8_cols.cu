// The MXFP8 column layout on the GPU: quantize_mxfp8_cols (moefuse/quant.h) and its bf16
// dequantise for the emulated MXFP8 backward GEMMs (mxfp8_cols.h). Both walk the blocks of
// column_blocks.cuh, a lane taking 4 columns of one 32-row block: the quantise reads 32 x 8 bytes
// of bf16 (each warp instruction 256 contiguous bytes of a row) and writes 32 x 4 bytes of codes
// and the 4 scale bytes; the dequantise reads 32 x 4 bytes of codes and 4 scale bytes and writes
// 32 x 8 bytes of bf16.
//
// Bit for bit the reference's (src/ref/quant.cpp quantize_mxfp8_cols / dequantize_mxfp8_cols):
// the amax is fmaxf over |x| (fmaxf skips NaN as formats::amax_bits), the scale code
// formats::mx_scale_code(amax), each x times formats::ue8m0_reciprocal(code) converted by the
// hardware (vec16.cuh e4m3x4 = formats::e4m3_from_float); the dequantise decodes by hardware
// (e4m3x4_to_float = formats::e4m3_to_float), multiplies by formats::ue8m0_to_float(code) in fp32
// (exact but at the range ends) and rounds once to bf16.
#include "cuda/quant/mxfp8_cols.h"

#include <cuda_bf16.h>

#include <cstdint>

#include "cuda/device.h"
#include "cuda/quant/column_blocks.cuh"
#include "cuda/quant/mx_block.cuh"
#include "cuda/quant/qdq_validate.h"
#include "cuda/quant/vec16.cuh"
#include "moefuse/quant.h"

namespace moefuse::cuda::quant {
namespace {

// 4 bytes, byte j at bits 8j.
__device__ __forceinline__ uint8_t byte_of(uint32_t w, int j) {
  return static_cast<uint8_t>(w >> (8 * j));
}

struct QuantizeColumns {
  const uint2* x;     // [rows, quads]: 4 bf16 in 8 bytes
  uint32_t* q;        // [rows, quads]: 4 e4m3 codes in 4 bytes
  uint32_t* scales;   // [blocks, quads]: 4 e8m0 codes in 4 bytes
  int quads;

  __device__ __forceinline__ void operator()(const BlockRows& b, int g, int quad) const {
    if (quad >= quads) return;  // N % 8 == 0: a lane's 4 columns are inside N or past it
    const int64_t at = int64_t{b.first} * quads + quad;
    uint2 w[kColumnBlock];
    MxScale s[4];
    load_column_block<true>(x + at, quads, b.rows, w, s);
#pragma unroll
    for (int r = 0; r < kColumnBlock; ++r)
      if (r < b.rows)
        q[at + int64_t{r} * quads] =
            e4m3x4(low_bf16(w[r].x) * s[0].multiplier, high_bf16(w[r].x) * s[1].multiplier,
                   low_bf16(w[r].y) * s[2].multiplier, high_bf16(w[r].y) * s[3].multiplier);
    scales[int64_t{g} * quads + quad] = uint32_t{s[0].code} | uint32_t{s[1].code} << 8 |
                                        uint32_t{s[2].code} << 16 | uint32_t{s[3].code} << 24;
  }
};

struct DequantizeColumns {
  const uint32_t* q;       // [rows, quads]
  const uint32_t* scales;  // [blocks, quads]
  uint2* out;              // [rows, quads]: 4 bf16 in 8 bytes
  int quads;

  __device__ __forceinline__ void operator()(const BlockRows& b, int g, int quad) const {
    if (quad >= quads) return;
    const int64_t at = int64_t{b.first} * quads + quad;
    uint32_t codes[kColumnBlock];
#pragma unroll
    for (int r = 0; r < kColumnBlock; ++r)
      codes[r] = r < b.rows ? __ldg(q + at + int64_t{r} * quads) : 0u;
    const uint32_t sc = __ldg(scales + int64_t{g} * quads + quad);
    float scale[4];
#pragma unroll
    for (int j = 0; j < 4; ++j) scale[j] = formats::ue8m0_to_float(byte_of(sc, j));
#pragma unroll
    for (int r = 0; r < kColumnBlock; ++r) {
      float f[4];
      e4m3x4_to_float(codes[r], f);
      const __nv_bfloat162 lo = __floats2bfloat162_rn(f[0] * scale[0], f[1] * scale[1]);
      const __nv_bfloat162 hi = __floats2bfloat162_rn(f[2] * scale[2], f[3] * scale[3]);
      if (r < b.rows)
        out[at + int64_t{r} * quads] = make_uint2(*reinterpret_cast<const uint32_t*>(&lo),
                                                  *reinterpret_cast<const uint32_t*>(&hi));
    }
  }
};

}  // namespace

void dequantize_mxfp8_cols_bf16(const TensorView& q, const TensorView& offsets, int64_t experts,
                                const TensorView& scales, const TensorView& out,
                                cudaStream_t stream) {
  const ColumnWalk w = column_walk(q, offsets, experts);
  launch_column_blocks(w,
                       DequantizeColumns{q.as<const uint32_t>(), scales.as<const uint32_t>(),
                                         out.as<uint2>(), w.quads},
                       stream);
}

}  // namespace moefuse::cuda::quant

namespace moefuse {

void quantize_mxfp8_cols(const TensorView& x, const TensorView& offsets, const TensorView& q,
                         const TensorView& scales, cudaStream_t stream) {
  using namespace cuda::quant;
  const int64_t experts =
      validate_mxfp8_cols(x, "x", DType::kBFloat16, offsets, q, scales, Device::kCuda,
                          Mxfp8ColsDirection::kQuantize);
  cuda::expect_launchable(stream);
  const ColumnWalk w = column_walk(x, offsets, experts);
  launch_column_blocks(w,
                       QuantizeColumns{x.as<const uint2>(), q.as<uint32_t>(),
                                       scales.as<uint32_t>(), w.quads},
                       stream);
}

}  // namespace moefuse
