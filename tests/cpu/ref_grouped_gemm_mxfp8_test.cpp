// The MXFP8 recipe of the FP8 grouped GEMM's CPU reference (moefuse/grouped_gemm_fp8.h) against
// an independent path: the quant reference's own MXFP8 dequantiser (row-major scales, fp32) and
// the fp64 matmul of ref/gemm.h. Also the K-major MXFP8 scale transposes and the recipe's
// validation errors.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <span>
#include <string>
#include <vector>

#include "common/fp8_operands.h"
#include "common/test_util.h"
#include "moefuse/grouped_gemm_fp8.h"
#include "ref/gemm.h"
#include "ref/grouped_gemm_fp8.h"
#include "ref/quant.h"
#include "ref_test_helpers.h"

namespace moefuse {
namespace {

using test::host;

constexpr uint8_t kUe8m0One = 127;

// The same memory seen with another shape (never larger than the original).
TensorView as_shape(const TensorView& t, std::initializer_list<int64_t> shape) {
  return TensorView::contiguous(t.data, t.dtype, shape);
}

// x [rows, k] with a random magnitude per 32-element block (10^±3), so the UE8M0 scales differ.
std::vector<float> spread_blocks(int64_t rows, int64_t k) {
  std::vector<float> x = test::random_normal(rows * k);
  const std::vector<float> mag = test::random_uniform(rows * (k / 32), -3.0f, 3.0f);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < k; ++j) x[r * k + j] *= std::pow(10.0f, mag[r * (k / 32) + j / 32]);
  return x;
}

// Rows [rows, k] quantised with the MXFP8 reference: codes, row-major scales, fp32 dequantised.
struct MxRows {
  int64_t rows, k;
  std::vector<uint8_t> q, s;
  std::vector<float> deq;
  MxRows(int64_t rows, int64_t k) : rows(rows), k(k), q(rows * k), s(rows * (k / 32)), deq(rows * k) {
    std::vector<float> x = spread_blocks(rows, k);
    ref::quantize_mxfp8(test::f32(x, {rows, k}), codes(), scales());
    ref::dequantize_mxfp8(codes(), scales(), test::f32(deq, {rows, k}));
  }
  TensorView codes() { return host(q.data(), DType::kFloat8E4M3, {rows, k}); }
  TensorView scales() { return host(s.data(), DType::kFloat8E8M0, {rows, k / 32}); }
};

struct Case {
  std::vector<int> counts;
  int row_base = 0, spare_rows = 0;
  int64_t n = 48, k = 96;
  bool fp32_out = true, row_scale = false;
};

class Fixture {
 public:
  explicit Fixture(const Case& c)
      : c_(c),
        experts_(static_cast<int64_t>(c.counts.size())),
        offsets_(test::offsets_of(c.counts, c.row_base)),
        m_cap_(offsets_.back() + c.spare_rows),
        a_(m_cap_, c.k),
        b_(experts_ * c.n, c.k),  // [E, N, K] as [E·N, K]: row-major scales are [E, N, K/32]
        a_scales_(c.k / 32 * mxfp8_scale_rows(m_cap_)),
        b_scales_(experts_ * c.n * (c.k / 32)),
        scale_(test::random_uniform(m_cap_, 0.1f, 1.0f)) {
    const int64_t kg = c.k / 32;
    transpose_mxfp8_activation_scales(a_.scales(), a_scales());
    transpose_mxfp8_weight_scales(host(b_.s.data(), DType::kFloat8E8M0, {experts_, c.n, kg}),
                                  b_scales());
    d_.assign(m_cap_ * c.n * (c.fp32_out ? 4 : 2), 0xFF);  // NaN in bf16 and fp32
  }

  TensorView a_scales() {
    return host(a_scales_.data(), DType::kFloat8E8M0, {c_.k / 32, mxfp8_scale_rows(m_cap_)});
  }
  TensorView b_scales() {
    return host(b_scales_.data(), DType::kFloat8E8M0, {experts_, c_.k / 32, c_.n});
  }

  GroupedGemmFp8Args args() {
    GroupedGemmFp8Args g{
        .a = a_.codes(),
        .a_scales = a_scales(),
        .b = host(b_.q.data(), DType::kFloat8E4M3, {experts_, c_.n, c_.k}),
        .b_scales = b_scales(),
        .offsets = test::i32(offsets_, {experts_ + 1}),
        .d = host(d_.data(), c_.fp32_out ? DType::kFloat32 : DType::kBFloat16, {m_cap_, c_.n}),
        .recipe = Fp8Recipe::kMxfp8};
    if (c_.row_scale) g.row_scale = test::f32(scale_, {m_cap_});
    return g;
  }

  // D from the dequantised fp32 operands by the fp64 matmul; NaN outside the experts.
  std::vector<double> expected() const {
    std::vector<double> want(m_cap_ * c_.n, std::numeric_limits<double>::quiet_NaN());
    for (int64_t e = 0; e < experts_; ++e) {
      const int64_t r0 = offsets_[e], rows = offsets_[e + 1] - offsets_[e];
      ref::matmul(rows, c_.n, c_.k, ref::rows_of(a_.deq.data() + r0 * c_.k, c_.k),
                  ref::rows_of(b_.deq.data() + e * c_.n * c_.k, c_.k).transposed(),
                  want.data() + r0 * c_.n, false);
      for (int64_t i = r0 * c_.n; i < (r0 + rows) * c_.n; ++i)
        want[i] *= c_.row_scale ? scale_[i / c_.n] : 1.0;
    }
    return want;
  }

  std::vector<float> got() const {
    std::vector<float> v(m_cap_ * c_.n);
    if (c_.fp32_out) {
      std::memcpy(v.data(), d_.data(), d_.size());
    } else {
      for (size_t i = 0; i < v.size(); ++i) {
        uint16_t h;
        std::memcpy(&h, &d_[2 * i], 2);
        v[i] = test::bf16_to_float(h);
      }
    }
    return v;
  }

  int64_t m_cap() const { return m_cap_; }
  const std::vector<int32_t>& offsets() const { return offsets_; }

 private:
  Case c_;
  int64_t experts_;
  std::vector<int32_t> offsets_;
  int64_t m_cap_;
  MxRows a_, b_;
  std::vector<uint8_t> a_scales_, b_scales_, d_;
  std::vector<float> scale_;
};

void check_case(const Case& c, const std::string& name) {
  SCOPED_TRACE(name + " (seed " + std::to_string(test::seed()) + ")");
  Fixture f(c);
  ref::grouped_gemm_fp8(f.args());
  const std::vector<float> got = f.got();
  const std::vector<double> want = f.expected();
  const int64_t first = f.offsets().front(), end = f.offsets().back();
  for (int64_t r = 0; r < f.m_cap(); ++r) {
    if (r >= first && r < end) continue;
    for (int64_t i = 0; i < c.n; ++i)
      ASSERT_TRUE(std::isnan(got[r * c.n + i])) << "row " << r << " outside the experts written";
  }
  const std::span<const float> g(got.data() + first * c.n, (end - first) * c.n);
  const std::span<const double> w(want.data() + first * c.n, (end - first) * c.n);
  // fp32: the dequantised operands are exact in fp32 (e4m3 · 2^e), so only D's rounding differs.
  EXPECT_LE(test::rel_norm_error(g, w), c.fp32_out ? 1e-6 : 4e-3);
}

// Ragged experts with empty ones; K not a multiple of 128; M_cap not a multiple of 16.
const std::vector<int> kRagged = {0, 5, 130, 1, 0, 37};

TEST(RefGroupedGemmMxfp8, LinearMatchesDequantisedProduct) {
  check_case({.counts = kRagged, .row_base = 2, .spare_rows = 3, .n = 48, .k = 96,
              .row_scale = true},
             "fp32, row scale");
  check_case({.counts = kRagged, .spare_rows = 1, .n = 32, .k = 160, .fp32_out = false}, "bf16");
  check_case({.counts = {0, 0, 0}, .row_base = 3, .spare_rows = 6, .n = 16, .k = 32},
             "no rows at all");
}

TEST(RefGroupedGemmMxfp8, ScaleTransposes) {
  MxRows a(21, 64);
  std::vector<uint8_t> t(2 * mxfp8_scale_rows(21));
  transpose_mxfp8_activation_scales(a.scales(), host(t.data(), DType::kFloat8E8M0, {2, 32}));
  for (int64_t g = 0; g < 2; ++g)
    for (int64_t r = 0; r < 32; ++r)
      ASSERT_EQ(t[g * 32 + r], r < 21 ? a.s[r * 2 + g] : kUe8m0One) << "group " << g << " row " << r;

  MxRows w(2 * 16, 96);  // [E = 2, N = 16, K = 96]
  std::vector<uint8_t> tw(w.s.size());
  transpose_mxfp8_weight_scales(host(w.s.data(), DType::kFloat8E8M0, {2, 16, 3}),
                                host(tw.data(), DType::kFloat8E8M0, {2, 3, 16}));
  for (int64_t e = 0; e < 2; ++e)
    for (int64_t g = 0; g < 3; ++g)
      for (int64_t n = 0; n < 16; ++n)
        ASSERT_EQ(tw[(e * 3 + g) * 16 + n], w.s[(e * 16 + n) * 3 + g]);

  test::expect_invalid(  // pitch 21: not padded to 16
      [&] {
        transpose_mxfp8_activation_scales(a.scales(), host(t.data(), DType::kFloat8E8M0, {2, 21}));
      },
      "dst");
  test::expect_invalid([&] { transpose_mxfp8_activation_scales(a.codes(), a.codes()); }, "src");
  test::expect_invalid(
      [&] {
        transpose_mxfp8_weight_scales(host(w.s.data(), DType::kFloat8E8M0, {2, 16, 3}),
                                      host(w.s.data(), DType::kFloat8E8M0, {2, 3, 16}));
      },
      "dst");
}

TEST(RefGroupedGemmMxfp8, RejectsBadArguments) {
  Fixture f({.counts = {3, 4}, .spare_rows = 2, .n = 32, .k = 64});
  auto expect_bad = [&](auto&& mutate, const std::string& name) {
    GroupedGemmFp8Args g = f.args();
    mutate(g);
    test::expect_invalid([&] { validate_grouped_gemm_fp8(g, Device::kCpu); }, name);
    test::expect_invalid([&] { ref::grouped_gemm_fp8(g); }, name);
  };
  expect_bad([](GroupedGemmFp8Args& g) { g.recipe = static_cast<Fp8Recipe>(7); }, "recipe");
  // DeepSeek-layout (fp32) scales with the MXFP8 recipe, and the reverse.
  expect_bad([](GroupedGemmFp8Args& g) { g.a_scales.dtype = DType::kFloat32; }, "a_scales");
  expect_bad([](GroupedGemmFp8Args& g) { g.recipe = Fp8Recipe::kDeepSeek; }, "b_scales");
  // Row-major [E, N, K/32] weight scales instead of K-major.
  expect_bad([](GroupedGemmFp8Args& g) { g.b_scales = as_shape(g.b_scales, {2, 32, 2}); },
             "b_scales");
  // M_cap = 9 padded to 4 (the DeepSeek pitch, 12) instead of 16.
  expect_bad([](GroupedGemmFp8Args& g) { g.a_scales = as_shape(g.a_scales, {2, 12}); },
             "a_scales");
  // K = 48: a multiple of 16 (accepted by the DeepSeek recipe) but not of 32.
  expect_bad([](GroupedGemmFp8Args& g) { g.b = as_shape(g.b, {2, 32, 48}); }, "b");
  // N = 24: not a multiple of 16.
  expect_bad([](GroupedGemmFp8Args& g) { g.b = as_shape(g.b, {2, 24, 64}); }, "b");
}

}  // namespace
}  // namespace moefuse
