// CPU reference quantisation recipes: hand-computed groups, round-trip error bounds, all-zero
// groups, saturation, tiny values, NaN/Inf, partial last groups.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "common/test_util.h"
#include "formats/recipes.h"
#include "ref/quant.h"

namespace moefuse::ref {
namespace {

using formats::e2m1_to_float;
using formats::e4m3_to_float;
using formats::ue8m0_to_float;

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Random normal data spread over ~2^+-12 so groups see very different magnitudes.
std::vector<float> wide_range(size_t n) {
  auto v = test::random_normal(n);
  auto e = test::random_uniform(n, -12.0f, 12.0f);
  for (size_t i = 0; i < n; ++i) v[i] = std::ldexp(v[i], static_cast<int>(e[i]));
  return v;
}

TensorView f32(std::vector<float>& v, std::initializer_list<int64_t> shape) {
  return TensorView::contiguous(v.data(), DType::kFloat32, shape);
}
TensorView u8(std::vector<uint8_t>& v, DType t, std::initializer_list<int64_t> shape) {
  return TensorView::contiguous(v.data(), t, shape);
}

// The whole tensor's relative error norm: every normal element is within 2^-4 of itself (the
// subnormals' absolute bound is negligible in the norm). 0.04 flaked: wide-range data puts the
// norm on a few large elements, whose rounding error is anywhere in [0, 2^-4] (0.0447, session 14).
constexpr double kE4m3HalfStep = 0.0625;

// |deq - x| within half an E4M3 step of x / scale: 2^-4 relative for normals, 2^-10 * scale
// for subnormals (the smallest subnormal is 2^-9), with slack for the fp32 multiply.
void expect_e4m3_error_bound(float x, float deq, float scale, const char* what, int64_t i) {
  const double bound = (std::fabs(double(x)) * 0x1p-4 + double(scale) * 0x1p-10) * (1 + 1e-6);
  ASSERT_LE(std::fabs(double(deq) - double(x)), bound)
      << what << " element " << i << ": x " << x << " deq " << deq << " scale " << scale;
}

TEST(QuantBlockwise1x128, HandComputedGroup) {
  std::vector<float> x = {896.0f, -224.0f, 1.0f, 0.0f};  // amax 896: scale 2, multiplier 0.5
  std::vector<uint8_t> q(4, 0xAA);
  std::vector<float> s(1, kNaN), back(4, kNaN);
  quantize_fp8_blockwise_1x128(f32(x, {1, 4}), u8(q, DType::kFloat8E4M3, {1, 4}), f32(s, {1, 1}));
  EXPECT_EQ(s[0], 2.0f);
  EXPECT_EQ(q, (std::vector<uint8_t>{0x7E, 0xEE, 0x30, 0x00}));  // 448, -112, 0.5, 0
  dequantize_fp8_blockwise_1x128(u8(q, DType::kFloat8E4M3, {1, 4}), f32(s, {1, 1}),
                                 f32(back, {1, 4}));
  EXPECT_EQ(back, x);
}

TEST(QuantBlockwise1x128, RoundTripWithinHalfStepAndPartialLastGroup) {
  const int64_t m = 5, k = 300, groups = ceil_div(k, 128);  // last group: 44 elements
  auto x = wide_range(m * k);
  for (int64_t c = 0; c < 128; ++c) x[1 * k + c] = 0.0f;  // an all-zero group
  std::vector<uint8_t> q(m * k, 0xAA);
  std::vector<float> s(m * groups, kNaN), back(m * k, kNaN);
  quantize_fp8_blockwise_1x128(f32(x, {m, k}), u8(q, DType::kFloat8E4M3, {m, k}),
                               f32(s, {m, groups}));
  dequantize_fp8_blockwise_1x128(u8(q, DType::kFloat8E4M3, {m, k}), f32(s, {m, groups}),
                                 f32(back, {m, k}));
  for (int64_t r = 0; r < m; ++r)
    for (int64_t g = 0; g < groups; ++g) {
      const int64_t c0 = g * 128, c1 = std::min(k, c0 + 128);
      float amax = 0;
      int64_t arg = c0;
      for (int64_t c = c0; c < c1; ++c)
        if (std::fabs(x[r * k + c]) > amax) amax = std::fabs(x[r * k + c]), arg = c;
      const float scale = s[r * groups + g];
      if (amax == 0) {
        EXPECT_EQ(scale, 1.0f) << "all-zero group row " << r << " group " << g;
      } else {
        EXPECT_EQ(scale, amax / 448.0f) << "row " << r << " group " << g;
        EXPECT_EQ(q[r * k + arg] & 0x7F, 0x7E) << "the group's amax maps to 448, row " << r;
      }
      for (int64_t c = c0; c < c1; ++c)
        expect_e4m3_error_bound(x[r * k + c], back[r * k + c], scale, "1x128", r * k + c);
    }
  EXPECT_LT(test::rel_norm_error(back, x), kE4m3HalfStep);
}

TEST(QuantBlockwise1x128, TinyNaNAndInfGroups) {
  // group 0: tiny (448 / amax overflows: multiplier capped, zeros stay zeros);
  // group 1: a NaN is kept, the rest uses the finite amax; group 2: an Inf poisons the group.
  std::vector<float> x(3 * 128);
  for (int i = 0; i < 128; ++i) x[i] = i % 2 ? 1e-40f : 0.0f;
  auto r = test::random_normal(256);
  std::copy(r.begin(), r.end(), x.begin() + 128);
  x[130] = kNaN;
  x[256 + 3] = -kInf;
  std::vector<uint8_t> q(x.size(), 0xAA);
  std::vector<float> s(3, kNaN), back(x.size(), kNaN);
  quantize_fp8_blockwise_1x128(f32(x, {1, 384}), u8(q, DType::kFloat8E4M3, {1, 384}),
                               f32(s, {1, 3}));
  dequantize_fp8_blockwise_1x128(u8(q, DType::kFloat8E4M3, {1, 384}), f32(s, {1, 3}),
                                 f32(back, {1, 384}));
  for (int i = 0; i < 128; i += 2) EXPECT_EQ(q[i], 0x00) << i;
  for (int i = 0; i < 128; ++i) EXPECT_TRUE(std::isfinite(back[i])) << i;
  EXPECT_EQ(q[130], formats::kFp8CanonicalNaN);
  EXPECT_TRUE(std::isnan(back[130]));
  for (int i = 128; i < 256; ++i)
    if (i != 130) expect_e4m3_error_bound(x[i], back[i], s[1], "NaN group", i);
  EXPECT_EQ(s[2], kInf);
  for (int i = 256; i < 384; ++i) EXPECT_TRUE(std::isnan(back[i])) << "Inf group element " << i;
}

TEST(QuantBlockwise128x128, StackedWeightsBlocksAndRoundTrip) {
  const int64_t e = 2, n = 130, k = 200, bn = ceil_div(n, 128), bk = ceil_div(k, 128);
  auto w = wide_range(e * n * k);
  for (int64_t r = 128; r < n; ++r)
    for (int64_t c = 128; c < k; ++c) w[(1 * n + r) * k + c] = 0.0f;  // expert 1, block (1, 1)
  std::vector<uint8_t> q(w.size(), 0xAA);
  std::vector<float> s(e * bn * bk, kNaN), back(w.size(), kNaN);
  quantize_fp8_blockwise_128x128(f32(w, {e, n, k}), u8(q, DType::kFloat8E4M3, {e, n, k}),
                                 f32(s, {e, bn, bk}));
  dequantize_fp8_blockwise_128x128(u8(q, DType::kFloat8E4M3, {e, n, k}), f32(s, {e, bn, bk}),
                                   f32(back, {e, n, k}));
  for (int64_t b = 0; b < e; ++b)
    for (int64_t i = 0; i < bn; ++i)
      for (int64_t j = 0; j < bk; ++j) {
        float amax = 0;
        for (int64_t r = i * 128; r < std::min(n, i * 128 + 128); ++r)
          for (int64_t c = j * 128; c < std::min(k, j * 128 + 128); ++c)
            amax = std::max(amax, std::fabs(w[(b * n + r) * k + c]));
        const float scale = s[(b * bn + i) * bk + j];
        EXPECT_EQ(scale, amax == 0 ? 1.0f : amax / 448.0f)
            << "expert " << b << " block (" << i << ", " << j << ")";
        for (int64_t r = i * 128; r < std::min(n, i * 128 + 128); ++r)
          for (int64_t c = j * 128; c < std::min(k, j * 128 + 128); ++c) {
            const int64_t idx = (b * n + r) * k + c;
            expect_e4m3_error_bound(w[idx], back[idx], scale, "128x128", idx);
          }
      }
  // The rank-2 form matches expert 0 of the stacked one.
  std::vector<float> w0(w.begin(), w.begin() + n * k), s0(bn * bk, kNaN);
  std::vector<uint8_t> q0(n * k, 0xAA);
  quantize_fp8_blockwise_128x128(f32(w0, {n, k}), u8(q0, DType::kFloat8E4M3, {n, k}),
                                 f32(s0, {bn, bk}));
  EXPECT_TRUE(std::equal(q0.begin(), q0.end(), q.begin()));
  EXPECT_TRUE(std::equal(s0.begin(), s0.end(), s.begin()));
}

TEST(QuantMxfp8, HandComputedBlocks) {
  // Block 0: amax 448 -> scale 2^0 (code 127), values exact. Block 1: amax 449 -> rounds up to
  // scale 2 (code 128), 449 / 2 = 224.5 -> 224. Block 2: all zero -> code 0 (2^-127).
  std::vector<float> x(96, 0.0f);
  x[0] = 448.0f, x[1] = -0.5f, x[32] = 449.0f, x[33] = 3.0f;
  std::vector<uint8_t> q(96, 0xAA), s(3, 0xAA);
  std::vector<float> back(96, kNaN);
  quantize_mxfp8(f32(x, {1, 96}), u8(q, DType::kFloat8E4M3, {1, 96}),
                 u8(s, DType::kFloat8E8M0, {1, 3}));
  EXPECT_EQ(s, (std::vector<uint8_t>{127, 128, 0}));
  EXPECT_EQ(q[0], 0x7E);
  EXPECT_EQ(q[1], 0xB0);  // -0.5
  EXPECT_EQ(e4m3_to_float(q[32]), 224.0f);
  EXPECT_EQ(e4m3_to_float(q[33]), 1.5f);
  for (int i = 64; i < 96; ++i) EXPECT_EQ(q[i], 0x00);
  dequantize_mxfp8(u8(q, DType::kFloat8E4M3, {1, 96}), u8(s, DType::kFloat8E8M0, {1, 3}),
                   f32(back, {1, 96}));
  EXPECT_EQ(back[0], 448.0f);
  EXPECT_EQ(back[32], 448.0f);
  EXPECT_EQ(back[33], 3.0f);
  EXPECT_EQ(back[64], 0.0f);
}

TEST(QuantMxfp8, ScaleIsTheSmallestPowerOfTwoThatAvoidsSaturation) {
  const int64_t m = 3, k = 100, blocks = ceil_div(k, 32);  // last block: 4 elements
  auto x = wide_range(m * k);
  std::vector<uint8_t> q(m * k, 0xAA), s(m * blocks, 0xAA);
  std::vector<float> back(m * k, kNaN);
  quantize_mxfp8(f32(x, {m, k}), u8(q, DType::kFloat8E4M3, {m, k}),
                 u8(s, DType::kFloat8E8M0, {m, blocks}));
  dequantize_mxfp8(u8(q, DType::kFloat8E4M3, {m, k}), u8(s, DType::kFloat8E8M0, {m, blocks}),
                   f32(back, {m, k}));
  for (int64_t r = 0; r < m; ++r)
    for (int64_t b = 0; b < blocks; ++b) {
      double amax = 0;
      for (int64_t c = b * 32; c < std::min(k, b * 32 + 32); ++c)
        amax = std::max(amax, std::fabs(double(x[r * k + c])));
      const double scale = ue8m0_to_float(s[r * blocks + b]);
      EXPECT_GE(scale * 448, amax) << "row " << r << " block " << b;
      EXPECT_LT(scale * 224, amax) << "row " << r << " block " << b;
      for (int64_t c = b * 32; c < std::min(k, b * 32 + 32); ++c)
        expect_e4m3_error_bound(x[r * k + c], back[r * k + c], float(scale), "mxfp8", r * k + c);
    }
  EXPECT_LT(test::rel_norm_error(back, x), kE4m3HalfStep);
}

TEST(QuantNvfp4, HandComputedBlockAndPacking) {
  // amax 6: encode scale 448, tensor scale 1/448, block scale e4m3(6 * 448 / 6) = 448, so the
  // values are their own E2M1 codes up to one fp32 rounding.
  std::vector<float> x = {6.0f, -0.5f, 3.0f, -2.0f, 1.5f, 1.0f, 0.5f, 0.0f,
                          4.0f, -6.0f, -1.0f, 2.0f, -3.0f, -4.0f, -1.5f, -0.0f};
  std::vector<uint8_t> q(8, 0xAA), bs(1, 0xAA);
  std::vector<float> ts(1, kNaN), back(16, kNaN);
  quantize_nvfp4(f32(x, {1, 16}), u8(q, DType::kFloat4E2M1, {1, 16}),
                 u8(bs, DType::kFloat8E4M3, {1, 1}), f32(ts, {1}));
  EXPECT_EQ(ts[0], 1.0f / 448.0f);
  EXPECT_EQ(bs[0], 0x7E);
  EXPECT_EQ(q, (std::vector<uint8_t>{0x97, 0xC5, 0x23, 0x01, 0xF6, 0x4A, 0xED, 0x8B}));
  dequantize_nvfp4(u8(q, DType::kFloat4E2M1, {1, 16}), u8(bs, DType::kFloat8E4M3, {1, 1}),
                   f32(ts, {1}), f32(back, {1, 16}));
  for (int i = 0; i < 16; ++i) EXPECT_NEAR(back[i], x[i], 1e-6) << i;
}

TEST(QuantNvfp4, RoundTripBoundsAndTensorScale) {
  const int64_t m = 7, k = 72, blocks = ceil_div(k, 16);  // last block: 8 elements
  auto x = wide_range(m * k);
  for (int64_t c = 16; c < 32; ++c) x[2 * k + c] = 0.0f;  // an all-zero block
  std::vector<uint8_t> q(m * k / 2, 0xAA), bs(m * blocks, 0xAA);
  std::vector<float> ts(1, kNaN), back(m * k, kNaN);
  quantize_nvfp4(f32(x, {m, k}), u8(q, DType::kFloat4E2M1, {m, k}),
                 u8(bs, DType::kFloat8E4M3, {m, blocks}), f32(ts, {1}));
  dequantize_nvfp4(u8(q, DType::kFloat4E2M1, {m, k}), u8(bs, DType::kFloat8E4M3, {m, blocks}),
                   f32(ts, {1}), f32(back, {m, k}));
  float amax = 0;
  int64_t arg = 0;
  for (int64_t i = 0; i < m * k; ++i)
    if (std::fabs(x[i]) > amax) amax = std::fabs(x[i]), arg = i;
  EXPECT_EQ(ts[0], 1.0f / (2688.0f / amax));
  EXPECT_EQ(bs[(arg / k) * blocks + (arg % k) / 16], 0x7E) << "the tensor amax's block scale is 448";
  EXPECT_EQ(bs[2 * blocks + 1], 0x00) << "all-zero block";
  for (int64_t i = 0; i < m * k; ++i) {
    const uint8_t code = bs[(i / k) * blocks + (i % k) / 16];
    const float mult = formats::nvfp4_value_multiplier(code, ts[0]);
    // Half an E2M1 step at v = x * mult is at most max(0.25, |v| / 4).
    const double v = std::fabs(double(x[i]) * mult);
    const double bound = std::max(0.25, v / 4) / mult * (1 + 1e-5);
    ASSERT_LE(std::fabs(double(back[i]) - double(x[i])), bound) << "element " << i << " x " << x[i];
  }
  EXPECT_LT(test::rel_norm_error(back, x), 0.15);
}

TEST(QuantNvfp4, AllZeroTensorAndNaN) {
  std::vector<float> x(32, 0.0f);
  std::vector<uint8_t> q(16, 0xAA), bs(2, 0xAA);
  std::vector<float> ts(1, kNaN);
  quantize_nvfp4(f32(x, {1, 32}), u8(q, DType::kFloat4E2M1, {1, 32}),
                 u8(bs, DType::kFloat8E4M3, {1, 2}), f32(ts, {1}));
  EXPECT_EQ(ts[0], 1.0f);
  EXPECT_EQ(bs, (std::vector<uint8_t>{0, 0}));
  EXPECT_EQ(q, std::vector<uint8_t>(16, 0));
  x[0] = 1.0f, x[1] = kNaN;
  quantize_nvfp4(f32(x, {1, 32}), u8(q, DType::kFloat4E2M1, {1, 32}),
                 u8(bs, DType::kFloat8E4M3, {1, 2}), f32(ts, {1}));
  EXPECT_EQ(q[0], 0x77) << "1.0 is the block max (6) and NaN encodes as +6";
}

// quantize_nvfp4_with_amax on the CPU: outputs {q, block scales, tensor scale} for a given amax.
struct Nvfp4Out {
  std::vector<uint8_t> q, bs;
  std::vector<float> ts = {kNaN};
  Nvfp4Out(int64_t m, int64_t k) : q(m * k / 2, 0xAA), bs(m * ceil_div(k, 16), 0xAA) {}
};
Nvfp4Out nvfp4_given(std::vector<float>& x, int64_t m, int64_t k, float amax) {
  Nvfp4Out o(m, k);
  std::vector<float> a = {amax};
  quantize_nvfp4_with_amax(f32(x, {m, k}), u8(o.q, DType::kFloat4E2M1, {m, k}),
                           u8(o.bs, DType::kFloat8E4M3, {m, ceil_div(k, 16)}), f32(a, {1}),
                           f32(o.ts, {1}));
  return o;
}

TEST(QuantNvfp4, GivenAmaxHandComputedSaturation) {
  // Given amax 2 (true 8): encode scale 1344, tensor scale 1/1344. Block 0 (amax 8) wants scale
  // e4m3(8 * 224) = 1792 and saturates to 448, so its multiplier is ~3: 8 and 2 clamp to +-6
  // (dequantised +-2 = the given amax), 1 and 0.5 stay exact. Block 1 (amax 0.25) is unaffected:
  // scale 56, multiplier 24.
  std::vector<float> x(32, 0.0f);
  const float block0[] = {8.0f, -8.0f, 2.0f, 1.0f, -1.0f, 0.5f};
  std::copy(std::begin(block0), std::end(block0), x.begin());
  x[16] = 0.25f, x[17] = -0.125f;
  const Nvfp4Out o = nvfp4_given(x, 1, 32, 2.0f);
  EXPECT_EQ(o.ts[0], 1.0f / 1344.0f);
  EXPECT_EQ(o.bs, (std::vector<uint8_t>{0x7E, 0x66}));  // 448, 56
  EXPECT_EQ(std::vector<uint8_t>(o.q.begin(), o.q.begin() + 3),
            (std::vector<uint8_t>{0xF7, 0x57, 0x3D}));  // 6, -6 | 6, 3 | -3, 1.5
  EXPECT_EQ(o.q[8], 0xD7) << "0.25 -> 6, -0.125 -> -3";
  std::vector<float> back(32, kNaN);
  std::vector<uint8_t> q = o.q, bs = o.bs;
  std::vector<float> ts = o.ts;
  dequantize_nvfp4(u8(q, DType::kFloat4E2M1, {1, 32}), u8(bs, DType::kFloat8E4M3, {1, 2}),
                   f32(ts, {1}), f32(back, {1, 32}));
  const float want[] = {2.0f, -2.0f, 2.0f, 1.0f, -1.0f, 0.5f};
  for (int i = 0; i < 6; ++i) EXPECT_NEAR(back[i], want[i], 1e-6) << i;
  EXPECT_NEAR(back[16], 0.25f, 1e-7);
  EXPECT_NEAR(back[17], -0.125f, 1e-7);
}

TEST(QuantNvfp4, GivenAmaxBelowTrueSaturatesExactlyThere) {
  const int64_t m = 9, k = 80, blocks = k / 16;
  auto x = wide_range(m * k);
  uint32_t bits = 0;
  for (float v : x) bits = formats::max_bits(bits, formats::amax_bits(v));
  const float true_amax = formats::bits_float(bits);
  // The true amax reproduces quantize_nvfp4.
  Nvfp4Out plain(m, k);
  quantize_nvfp4(f32(x, {m, k}), u8(plain.q, DType::kFloat4E2M1, {m, k}),
                 u8(plain.bs, DType::kFloat8E4M3, {m, blocks}), f32(plain.ts, {1}));
  const Nvfp4Out same = nvfp4_given(x, m, k, true_amax);
  EXPECT_EQ(same.q, plain.q);
  EXPECT_EQ(same.bs, plain.bs);
  EXPECT_EQ(same.ts, plain.ts);
  // A quarter of it: blocks at or above the given amax get scale 448 and their elements at or
  // above it dequantise to exactly +-6 * 448 * tensor scale; any element whose scaled value
  // exceeds 6 (also in a block whose scale rounded down) clamps to 6; the rest round as usual.
  const float given = true_amax / 4;
  Nvfp4Out o = nvfp4_given(x, m, k, given);
  EXPECT_EQ(o.ts[0], 1.0f / (2688.0f / given));
  std::vector<float> back(m * k, kNaN);
  dequantize_nvfp4(u8(o.q, DType::kFloat4E2M1, {m, k}), u8(o.bs, DType::kFloat8E4M3, {m, blocks}),
                   f32(o.ts, {1}), f32(back, {m, k}));
  int64_t saturated = 0;
  const float clamped = 6.0f * 448.0f * o.ts[0];
  for (int64_t r = 0; r < m; ++r)
    for (int64_t b = 0; b < blocks; ++b) {
      float block_amax = 0;
      for (int64_t c = b * 16; c < b * 16 + 16; ++c)
        block_amax = std::max(block_amax, std::fabs(x[r * k + c]));
      if (block_amax >= given) EXPECT_EQ(o.bs[r * blocks + b], 0x7E) << r << ", " << b;
    }
  for (int64_t i = 0; i < m * k; ++i) {
    const uint8_t code = o.bs[(i / k) * blocks + (i % k) / 16];
    const float mult = formats::nvfp4_value_multiplier(code, o.ts[0]);
    const double v = std::fabs(double(x[i]) * mult);
    if (std::fabs(x[i]) >= given) {
      ++saturated;
      ASSERT_EQ(back[i], std::copysign(clamped, x[i])) << "element " << i;
    } else if (v > 6) {
      ASSERT_EQ(back[i], std::copysign(6.0f * e4m3_to_float(code) * o.ts[0], x[i])) << i;
    }
    if (v > 6) continue;
    const double bound = std::max(0.25, v / 4) / mult * (1 + 1e-5);
    ASSERT_LE(std::fabs(double(back[i]) - double(x[i])), bound) << "element " << i << " x " << x[i];
  }
  EXPECT_GT(saturated, 0) << "a quarter of the true amax must saturate something";
}

TEST(QuantNvfp4, GivenAmaxZeroInfNaN) {
  std::vector<float> x = wide_range(2 * 32);
  x[3] = 0.0f;
  // 0, +-Inf, NaN and negative: tensor scale 1 (as quantize_nvfp4 for an all-zero tensor or one
  // with an Inf); a NaN amax must not scale the tensor to ~0 (encode scale FLT_MAX).
  const Nvfp4Out zero = nvfp4_given(x, 2, 32, 0.0f);
  EXPECT_EQ(zero.ts[0], 1.0f);
  for (float amax : {kInf, -kInf, kNaN, -1.0f}) {
    const Nvfp4Out o = nvfp4_given(x, 2, 32, amax);
    EXPECT_EQ(o.ts, zero.ts);
    EXPECT_EQ(o.bs, zero.bs);
    EXPECT_EQ(o.q, zero.q);
  }
  for (int b = 0; b < 4; ++b) {
    float block_amax = 0;
    for (int i = b * 16; i < b * 16 + 16; ++i) block_amax = std::max(block_amax, std::fabs(x[i]));
    EXPECT_EQ(zero.bs[b], formats::e4m3_from_float(block_amax * (1.0f / 6.0f))) << b;
  }
}

}  // namespace
}  // namespace moefuse::ref
