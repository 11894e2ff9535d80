#include "ref/quant.h"

#include <algorithm>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "cuda/quant/qdq_validate.h"
#include "formats/recipes.h"
#include "moefuse/error.h"
#include "ref/check.h"

namespace moefuse::ref {
namespace {

using namespace moefuse::formats;

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// A tensor seen as `batches` row-major matrices [rows, cols], cut into tiles of
// tile_rows x tile_cols (the last ones clipped). Tile (b, i, j) owns scale entry
// (b * tiles_r + i) * tiles_c + j, which is the row-major scale layout of quant.h.
struct Tiling {
  int64_t batches, rows, cols, tile_rows, tile_cols;
  int64_t tiles_r() const { return ceil_div(rows, tile_rows); }
  int64_t tiles_c() const { return ceil_div(cols, tile_cols); }
};

// Calls f(scale_index, each) per tile, where each(g) calls g(flat element index) over the tile.
template <class F>
void for_each_tile(const Tiling& t, F&& f) {
  int64_t s = 0;
  for (int64_t b = 0; b < t.batches; ++b)
    for (int64_t i = 0; i < t.tiles_r(); ++i)
      for (int64_t j = 0; j < t.tiles_c(); ++j, ++s) {
        const int64_t r0 = i * t.tile_rows, r1 = std::min(r0 + t.tile_rows, t.rows);
        const int64_t c0 = j * t.tile_cols, c1 = std::min(c0 + t.tile_cols, t.cols);
        auto each = [&](auto&& g) {
          for (int64_t r = r0; r < r1; ++r)
            for (int64_t c = c0; c < c1; ++c) g((b * t.rows + r) * t.cols + c);
        };
        f(s, each);
      }
}

// E4M3 values with one scale per tile: multiplier = set_scale(scale_index, amax) stores the
// tile's scale and returns what x is multiplied by before rounding.
template <class SetScale>
void quantize_e4m3_tiles(const float* x, uint8_t* q, const Tiling& t, SetScale set_scale) {
  for_each_tile(t, [&](int64_t s, auto each) {
    uint32_t amax = 0;
    each([&](int64_t i) { amax = max_bits(amax, amax_bits(x[i])); });
    const float multiplier = set_scale(s, bits_float(amax));
    each([&](int64_t i) { q[i] = e4m3_from_float(x[i] * multiplier); });
  });
}

// x = e4m3 value * scale(scale_index).
template <class GetScale>
void dequantize_e4m3_tiles(const uint8_t* q, float* x, const Tiling& t, GetScale scale) {
  for_each_tile(t, [&](int64_t s, auto each) {
    const float sc = scale(s);
    each([&](int64_t i) { x[i] = e4m3_to_float(q[i]) * sc; });
  });
}

// MXFP8 over the tiles of `t` (1x32 along rows, 32x1 down columns): E4M3 codes, UE8M0 scales.
void quantize_mx_tiles(const float* x, uint8_t* q, uint8_t* scales, const Tiling& t) {
  quantize_e4m3_tiles(x, q, t, [&](int64_t s, float amax) {
    scales[s] = mx_scale_code(amax);
    return ue8m0_reciprocal(scales[s]);
  });
}

void dequantize_mx_tiles(const uint8_t* q, const uint8_t* scales, float* x, const Tiling& t) {
  dequantize_e4m3_tiles(q, x, t, [&](int64_t s) { return ue8m0_to_float(scales[s]); });
}

// x through MXFP8 and back into out (which may be x: every code is taken before any write).
void qdq_mx_tiles(const float* x, float* out, const Tiling& t) {
  std::vector<uint8_t> q(t.batches * t.rows * t.cols);
  std::vector<uint8_t> scales(t.batches * t.tiles_r() * t.tiles_c());
  quantize_mx_tiles(x, q.data(), scales.data(), t);
  dequantize_mx_tiles(q.data(), scales.data(), out, t);
}

// The row-major matrices the MXFP8 column blocks restart in, m rows in all: f(first row, rows,
// first block) for each expert's rows (offsets checked against m), or once for all m rows without
// offsets (experts 0). Blocks count ceil(rows / 32) a matrix, in order.
template <class F>
void for_each_column_matrix(int64_t m, const TensorView& offsets, int64_t experts, F&& f) {
  if (experts == 0) {
    f(0, m, 0);
    return;
  }
  expect_offsets(offsets, "offsets", experts, m);
  const int32_t* o = offsets.as<const int32_t>();
  int64_t block = 0;
  for (int64_t e = 0; e < experts; ++e) {
    f(o[e], o[e + 1] - o[e], block);
    block += ceil_div(o[e + 1] - o[e], kMxBlock);
  }
}

// [M, K] of `dtype`; returns {M, K}.
std::pair<int64_t, int64_t> matrix_extents(const TensorView& t, std::string_view name, DType dtype) {
  expect_tensor(t, name, dtype, Device::kCpu, {kAnyExtent, kAnyExtent});
  return {t.size(0), t.size(1)};
}

// [N, K] or [E, N, K] of `dtype` as a Tiling of 128x128 blocks.
Tiling weight_tiling(const TensorView& t, std::string_view name, DType dtype) {
  MOEFUSE_EXPECT(t.rank == 2 || t.rank == 3, name, "rank 2 [N, K] or rank 3 [E, N, K]",
                 "shape " + shape_string(t));
  if (t.rank == 2) {
    expect_tensor(t, name, dtype, Device::kCpu, {kAnyExtent, kAnyExtent});
    return {1, t.size(0), t.size(1), kBlockwiseGroup, kBlockwiseGroup};
  }
  expect_tensor(t, name, dtype, Device::kCpu, {kAnyExtent, kAnyExtent, kAnyExtent});
  return {t.size(0), t.size(1), t.size(2), kBlockwiseGroup, kBlockwiseGroup};
}

// `t` [N, K] (rank 2) or [E, N, K] (rank 3) with the extents of `w`.
void expect_weight_like(const TensorView& t, std::string_view name, DType dtype, int rank,
                        const Tiling& w) {
  if (rank == 2)
    expect_tensor(t, name, dtype, Device::kCpu, {w.rows, w.cols});
  else
    expect_tensor(t, name, dtype, Device::kCpu, {w.batches, w.rows, w.cols});
}

void expect_weight_scales(const TensorView& scales, int rank, const Tiling& w) {
  if (rank == 2)
    expect_tensor(scales, "scales", DType::kFloat32, Device::kCpu, {w.tiles_r(), w.tiles_c()});
  else
    expect_tensor(scales, "scales", DType::kFloat32, Device::kCpu,
                  {w.batches, w.tiles_r(), w.tiles_c()});
}

void expect_even_columns(int64_t k, std::string_view name) {
  MOEFUSE_EXPECT(k % 2 == 0, name, "an even number of columns (two FP4 values per byte)",
                 std::to_string(k) + " columns");
}

// The views of an NVFP4 quantise; returns {M, K}.
std::pair<int64_t, int64_t> expect_nvfp4_quantize(const TensorView& x, const TensorView& q,
                                                  const TensorView& block_scales,
                                                  const TensorView& tensor_scale) {
  auto [m, k] = matrix_extents(x, "x", DType::kFloat32);
  expect_even_columns(k, "x");
  expect_tensor(q, "q", DType::kFloat4E2M1, Device::kCpu, {m, k});
  expect_tensor(block_scales, "block_scales", DType::kFloat8E4M3, Device::kCpu,
                {m, ceil_div(k, kNvfp4Block)});
  expect_tensor(tensor_scale, "tensor_scale", DType::kFloat32, Device::kCpu, {1});
  return {m, k};
}

// NVFP4 of checked views against the tensor amax `amax`, whatever it is (the GPU kernel's
// arithmetic: an amax below max |x| saturates, see moefuse/quant.h).
void quantize_nvfp4_given(const TensorView& x, const TensorView& q, const TensorView& block_scales,
                          float amax, const TensorView& tensor_scale) {
  const int64_t m = x.size(0), k = x.size(1);
  const float* xs = x.as<const float>();
  const float encode = nvfp4_tensor_encode_scale(amax);
  const float ts = nvfp4_tensor_scale(encode);
  *tensor_scale.as<float>() = ts;
  uint8_t* packed = q.as<uint8_t>();
  uint8_t* bs = block_scales.as<uint8_t>();
  for_each_tile(Tiling{1, m, k, 1, kNvfp4Block}, [&](int64_t s, auto each) {
    uint32_t block_amax = 0;
    each([&](int64_t i) { block_amax = max_bits(block_amax, amax_bits(xs[i])); });
    bs[s] = nvfp4_block_scale_code(bits_float(block_amax), encode);
    const float multiplier = nvfp4_value_multiplier(bs[s], ts);
    each([&](int64_t i) {
      const uint8_t code = e2m1_from_float(xs[i] * multiplier);
      uint8_t& byte = packed[i / 2];
      byte = i % 2 == 0 ? pack_e2m1x2(code, byte >> 4) : pack_e2m1x2(byte, code);
    });
  });
}

}  // namespace

void quantize_fp8_blockwise_1x128(const TensorView& x, const TensorView& q,
                                  const TensorView& scales) {
  auto [m, k] = matrix_extents(x, "x", DType::kFloat32);
  expect_tensor(q, "q", DType::kFloat8E4M3, Device::kCpu, {m, k});
  expect_tensor(scales, "scales", DType::kFloat32, Device::kCpu, {m, ceil_div(k, kBlockwiseGroup)});
  float* sc = scales.as<float>();
  quantize_e4m3_tiles(x.as<const float>(), q.as<uint8_t>(), {1, m, k, 1, kBlockwiseGroup},
                      [&](int64_t s, float amax) {
                        const BlockwiseScale b = blockwise_scale(amax);
                        sc[s] = b.scale;
                        return b.multiplier;
                      });
}

void dequantize_fp8_blockwise_1x128(const TensorView& q, const TensorView& scales,
                                    const TensorView& x) {
  auto [m, k] = matrix_extents(q, "q", DType::kFloat8E4M3);
  expect_tensor(scales, "scales", DType::kFloat32, Device::kCpu, {m, ceil_div(k, kBlockwiseGroup)});
  expect_tensor(x, "x", DType::kFloat32, Device::kCpu, {m, k});
  const float* sc = scales.as<const float>();
  dequantize_e4m3_tiles(q.as<const uint8_t>(), x.as<float>(), {1, m, k, 1, kBlockwiseGroup},
                        [&](int64_t s) { return sc[s]; });
}

void quantize_fp8_blockwise_128x128(const TensorView& w, const TensorView& q,
                                    const TensorView& scales) {
  const Tiling t = weight_tiling(w, "w", DType::kFloat32);
  expect_weight_like(q, "q", DType::kFloat8E4M3, w.rank, t);
  expect_weight_scales(scales, w.rank, t);
  float* sc = scales.as<float>();
  quantize_e4m3_tiles(w.as<const float>(), q.as<uint8_t>(), t, [&](int64_t s, float amax) {
    const BlockwiseScale b = blockwise_scale(amax);
    sc[s] = b.scale;
    return b.multiplier;
  });
}

void dequantize_fp8_blockwise_128x128(const TensorView& q, const TensorView& scales,
                                      const TensorView& w) {
  const Tiling t = weight_tiling(q, "q", DType::kFloat8E4M3);
  expect_weight_scales(scales, q.rank, t);
  expect_weight_like(w, "w", DType::kFloat32, q.rank, t);
  const float* sc = scales.as<const float>();
  dequantize_e4m3_tiles(q.as<const uint8_t>(), w.as<float>(), t, [&](int64_t s) { return sc[s]; });
}

void quantize_mxfp8(const TensorView& x, const TensorView& q, const TensorView& scales) {
  auto [m, k] = matrix_extents(x, "x", DType::kFloat32);
  expect_tensor(q, "q", DType::kFloat8E4M3, Device::kCpu, {m, k});
  expect_tensor(scales, "scales", DType::kFloat8E8M0, Device::kCpu, {m, ceil_div(k, kMxBlock)});
  quantize_mx_tiles(x.as<const float>(), q.as<uint8_t>(), scales.as<uint8_t>(),
                    {1, m, k, 1, kMxBlock});
}

void dequantize_mxfp8(const TensorView& q, const TensorView& scales, const TensorView& x) {
  auto [m, k] = matrix_extents(q, "q", DType::kFloat8E4M3);
  expect_tensor(scales, "scales", DType::kFloat8E8M0, Device::kCpu, {m, ceil_div(k, kMxBlock)});
  expect_tensor(x, "x", DType::kFloat32, Device::kCpu, {m, k});
  dequantize_mx_tiles(q.as<const uint8_t>(), scales.as<const uint8_t>(), x.as<float>(),
                      {1, m, k, 1, kMxBlock});
}

void qdq_mxfp8_rows(const TensorView& x, const TensorView& out) {
  auto [m, k] = validate_qdq_mxfp8_rows(x, out, DType::kFloat32, Device::kCpu);
  qdq_mx_tiles(x.as<const float>(), out.as<float>(), {1, m, k, 1, kMxBlock});
}

void qdq_mxfp8_cols(const TensorView& x, const TensorView& offsets, const TensorView& out) {
  const int64_t experts = validate_qdq_mxfp8_cols(x, offsets, out, DType::kFloat32, Device::kCpu);
  const int64_t n = x.size(1);
  for_each_column_matrix(x.size(0), offsets, experts, [&](int64_t first, int64_t rows, int64_t) {
    qdq_mx_tiles(x.as<const float>() + first * n, out.as<float>() + first * n,
                 {1, rows, n, kMxBlock, 1});
  });
}

void quantize_mxfp8_cols(const TensorView& x, const TensorView& offsets, const TensorView& q,
                         const TensorView& scales) {
  const int64_t experts = validate_mxfp8_cols(x, "x", DType::kFloat32, offsets, q, scales,
                                              Device::kCpu, Mxfp8ColsDirection::kQuantize);
  const int64_t n = x.size(1);
  for_each_column_matrix(x.size(0), offsets, experts,
                         [&](int64_t first, int64_t rows, int64_t block) {
                           quantize_mx_tiles(x.as<const float>() + first * n,
                                             q.as<uint8_t>() + first * n,
                                             scales.as<uint8_t>() + block * n,
                                             {1, rows, n, kMxBlock, 1});
                         });
}

void dequantize_mxfp8_cols(const TensorView& q, const TensorView& offsets,
                           const TensorView& scales, const TensorView& x) {
  const int64_t experts = validate_mxfp8_cols(x, "x", DType::kFloat32, offsets, q, scales,
                                              Device::kCpu, Mxfp8ColsDirection::kDequantize);
  const int64_t n = x.size(1);
  for_each_column_matrix(x.size(0), offsets, experts,
                         [&](int64_t first, int64_t rows, int64_t block) {
                           dequantize_mx_tiles(q.as<const uint8_t>() + first * n,
                                               scales.as<const uint8_t>() + block * n,
                                               x.as<float>() + first * n,
                                               {1, rows, n, kMxBlock, 1});
                         });
}

void quantize_nvfp4(const TensorView& x, const TensorView& q, const TensorView& block_scales,
                    const TensorView& tensor_scale) {
  auto [m, k] = expect_nvfp4_quantize(x, q, block_scales, tensor_scale);
  const float* xs = x.as<const float>();
  uint32_t amax = 0;
  for (int64_t i = 0; i < m * k; ++i) amax = max_bits(amax, amax_bits(xs[i]));
  quantize_nvfp4_given(x, q, block_scales, bits_float(amax), tensor_scale);
}

void quantize_nvfp4_with_amax(const TensorView& x, const TensorView& q,
                              const TensorView& block_scales, const TensorView& amax,
                              const TensorView& tensor_scale) {
  expect_nvfp4_quantize(x, q, block_scales, tensor_scale);
  expect_tensor(amax, "amax", DType::kFloat32, Device::kCpu, {1});
  MOEFUSE_EXPECT(amax.data != tensor_scale.data, "tensor_scale", "a buffer distinct from amax",
                 "the amax buffer");
  quantize_nvfp4_given(x, q, block_scales, *amax.as<const float>(), tensor_scale);
}

void dequantize_nvfp4(const TensorView& q, const TensorView& block_scales,
                      const TensorView& tensor_scale, const TensorView& x) {
  auto [m, k] = matrix_extents(q, "q", DType::kFloat4E2M1);
  expect_even_columns(k, "q");
  expect_tensor(block_scales, "block_scales", DType::kFloat8E4M3, Device::kCpu,
                {m, ceil_div(k, kNvfp4Block)});
  expect_tensor(tensor_scale, "tensor_scale", DType::kFloat32, Device::kCpu, {1});
  expect_tensor(x, "x", DType::kFloat32, Device::kCpu, {m, k});
  const uint8_t* packed = q.as<const uint8_t>();
  const uint8_t* bs = block_scales.as<const uint8_t>();
  const float ts = *tensor_scale.as<const float>();
  float* xs = x.as<float>();
  for_each_tile(Tiling{1, m, k, 1, kNvfp4Block}, [&](int64_t s, auto each) {
    each([&](int64_t i) {
      const uint8_t byte = packed[i / 2];
      xs[i] = nvfp4_dequant(i % 2 == 0 ? byte : byte >> 4, bs[s], ts);
    });
  });
}

}  // namespace moefuse::ref
