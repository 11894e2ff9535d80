// CPU reference of the MXFP8 quantise-dequantise passes (ref::qdq_mxfp8_rows / _cols) against
// quantize_mxfp8 then dequantize_mxfp8: rows directly; columns through each expert's rows,
// transposed, quantised along them with a short last block, and transposed back (an expectation
// built without the Tiling the reference uses). Wide-range data with NaN, Inf and all-zero
// blocks; empty experts, experts of any row count, rows outside the offsets untouched, the
// offsets-absent form, in place; a hand-computed block restart; every bad argument named.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "common/fp8_operands.h"
#include "common/test_util.h"
#include "ref/quant.h"

namespace moefuse::ref {
namespace {

using test::expect_invalid;

constexpr float kPoison = -12345.0f;  // in no output: marks elements the pass must not write

TensorView f32(std::vector<float>& v, std::initializer_list<int64_t> shape) {
  return TensorView::contiguous(v.data(), DType::kFloat32, shape);
}
TensorView i32(std::vector<int32_t>& v) {
  return TensorView::contiguous(v.data(), DType::kInt32, {static_cast<int64_t>(v.size())});
}

// Normal values times 2^U(-20, 20) per 8 elements (so a 32-element block spans a wide range and
// neighbouring blocks differ), an all-zero run, a NaN, +-Inf and values beyond 448 * 2^k.
std::vector<float> test_data(int64_t n) {
  auto v = test::random_normal(n);
  const auto e = test::random_uniform(n / 8 + 1, -20.0f, 20.0f);
  for (int64_t i = 0; i < n; ++i) v[i] = std::ldexp(v[i], static_cast<int>(e[i / 8]));
  if (n >= 256) {
    for (int64_t i = 64; i < 96; ++i) v[i] = 0.0f;
    v[5] = std::numeric_limits<float>::quiet_NaN();
    v[130] = std::numeric_limits<float>::infinity();
    v[200] = -std::numeric_limits<float>::infinity();
    v[250] = 449.0f * 0x1p100f;
  }
  return v;
}

// Identical bits, or both NaN.
::testing::AssertionResult same_values(const std::vector<float>& got,
                                       const std::vector<float>& want, int64_t cols) {
  if (got.size() != want.size()) return ::testing::AssertionFailure() << "sizes differ";
  for (size_t i = 0; i < got.size(); ++i) {
    const bool same = std::memcmp(&got[i], &want[i], 4) == 0 ||
                      (std::isnan(got[i]) && std::isnan(want[i]));
    if (!same)
      return ::testing::AssertionFailure()
             << "element " << i << " (row " << int64_t(i) / cols << ", col " << int64_t(i) % cols
             << "): got " << got[i] << ", want " << want[i];
  }
  return ::testing::AssertionSuccess();
}

// quantize_mxfp8 then dequantize_mxfp8 of x [m, k] (any k: a short last block is allowed there).
std::vector<float> quantize_dequantize(std::vector<float> x, int64_t m, int64_t k) {
  const int64_t groups = (k + 31) / 32;
  std::vector<uint8_t> q(m * k), scales(m * groups);
  std::vector<float> back(m * k);
  quantize_mxfp8(f32(x, {m, k}), TensorView::contiguous(q.data(), DType::kFloat8E4M3, {m, k}),
                 TensorView::contiguous(scales.data(), DType::kFloat8E8M0, {m, groups}));
  dequantize_mxfp8(TensorView::contiguous(q.data(), DType::kFloat8E4M3, {m, k}),
                   TensorView::contiguous(scales.data(), DType::kFloat8E8M0, {m, groups}),
                   f32(back, {m, k}));
  return back;
}

// The columns pass's expectation: `out` with rows [first, first + rows) of x replaced by their
// column-wise quantise-dequantise (transpose, along rows, transpose back).
void expect_block_columns(const std::vector<float>& x, int64_t n, int64_t first, int64_t rows,
                          std::vector<float>& out) {
  std::vector<float> t(n * rows);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < n; ++c) t[c * rows + r] = x[(first + r) * n + c];
  const std::vector<float> back = quantize_dequantize(t, n, rows);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < n; ++c) out[(first + r) * n + c] = back[c * rows + r];
}

TEST(QuantRefQdq, RowsEqualQuantizeThenDequantize) {
  for (auto [m, k] : {std::pair<int64_t, int64_t>{7, 320}, {1, 32}, {0, 64}, {33, 96}}) {
    SCOPED_TRACE("x [" + std::to_string(m) + ", " + std::to_string(k) + "], seed " +
                 std::to_string(test::seed()));
    auto x = test_data(m * k);
    std::vector<float> out(m * k, kPoison);
    qdq_mxfp8_rows(f32(x, {m, k}), f32(out, {m, k}));
    const std::vector<float> want = quantize_dequantize(x, m, k);
    EXPECT_TRUE(same_values(out, want, k));
    qdq_mxfp8_rows(f32(x, {m, k}), f32(x, {m, k}));  // in place
    EXPECT_TRUE(same_values(x, want, k));
  }
}

// Experts: empty ones (first, middle, last), short ones, one of 45 rows (a short last block), one
// of 64 (two whole blocks); rows before offsets[0] and past offsets[E] keep the poison. N = 40 is
// no multiple of 32 (columns have no blocks of their own).
TEST(QuantRefQdq, ColsEqualRowsOfTransposedExperts) {
  const int64_t n = 40;
  const std::vector<std::vector<int>> cases = {
      {0, 45, 64, 0, 7, 1, 0}, {100}, {0, 0, 31}, {32, 33}};
  for (const auto& counts : cases) {
    const std::vector<int32_t> offsets = test::offsets_of(counts, 3);
    const int64_t m = offsets.back() + 5;
    SCOPED_TRACE(std::to_string(counts.size()) + " experts, " + std::to_string(m) +
                 " rows, seed " + std::to_string(test::seed()));
    auto x = test_data(m * n);
    std::vector<float> want(m * n, kPoison), out(m * n, kPoison);
    for (size_t e = 0; e + 1 < offsets.size(); ++e)
      expect_block_columns(x, n, offsets[e], offsets[e + 1] - offsets[e], want);
    auto o = offsets;
    qdq_mxfp8_cols(f32(x, {m, n}), i32(o), f32(out, {m, n}));
    EXPECT_TRUE(same_values(out, want, n));
    for (int64_t i = 0; i < m * n; ++i)  // in place: the rows outside keep x
      if (want[i] == kPoison) want[i] = x[i];
    qdq_mxfp8_cols(f32(x, {m, n}), i32(o), f32(x, {m, n}));
    EXPECT_TRUE(same_values(x, want, n));
  }
}

// Without offsets: blocks of 32 rows from row 0 (stacked weights), the same as one expert of M
// rows and as experts of whole blocks.
TEST(QuantRefQdq, ColsWithoutOffsetsAreBlocksFromRowZero) {
  const int64_t m = 96, n = 24;
  auto x = test_data(m * n);
  std::vector<float> want(m * n), out(m * n, kPoison), split(m * n, kPoison);
  expect_block_columns(x, n, 0, m, want);
  qdq_mxfp8_cols(f32(x, {m, n}), TensorView{}, f32(out, {m, n}));
  EXPECT_TRUE(same_values(out, want, n));
  std::vector<int32_t> whole_blocks = {0, 32, 96};
  qdq_mxfp8_cols(f32(x, {m, n}), i32(whole_blocks), f32(split, {m, n}));
  EXPECT_TRUE(same_values(split, want, n));
  std::vector<float> none;
  qdq_mxfp8_cols(f32(none, {0, n}), TensorView{}, f32(none, {0, n}));  // M = 0
}

// A block of [7168, 0.01] has scale 2^4: 0.01 / 16 is below half the smallest E4M3 subnormal
// (2^-10), so it becomes 0. Alone in the next expert's block, 0.01 gets scale 2^-15 and comes
// back as 320 * 2^-15. Blocks that ran across the expert boundary would make it 0 as well.
TEST(QuantRefQdq, ColsBlocksRestartAtEachExpert) {
  const int64_t m = 4, n = 8;
  std::vector<float> x(m * n), out(m * n, kPoison);
  for (int64_t c = 0; c < n; ++c) {
    x[0 * n + c] = 7168.0f;
    x[1 * n + c] = 0.01f;
    x[2 * n + c] = 0.01f;
    x[3 * n + c] = 1.0f;
  }
  std::vector<int32_t> offsets = {0, 2, 3};
  qdq_mxfp8_cols(f32(x, {m, n}), i32(offsets), f32(out, {m, n}));
  for (int64_t c = 0; c < n; ++c) {
    EXPECT_EQ(out[0 * n + c], 7168.0f);
    EXPECT_EQ(out[1 * n + c], 0.0f);
    EXPECT_EQ(out[2 * n + c], 320.0f * 0x1p-15f);
    EXPECT_EQ(out[3 * n + c], kPoison);  // past offsets[E]
  }
}

TEST(QuantRefQdq, RejectsBadArgumentsNamingThem) {
  std::vector<float> a(64 * 64), b(64 * 64);
  auto view = [](std::vector<float>& v, int64_t m, int64_t k, int64_t at = 0) {
    return TensorView::contiguous(v.data() + at, DType::kFloat32, {m, k});
  };
  const auto x = view(a, 64, 64), out = view(b, 64, 64);
  auto bf16 = x;
  bf16.dtype = DType::kBFloat16;
  auto cuda = x;
  cuda.device = Device::kCuda;
  expect_invalid([&] { qdq_mxfp8_rows(bf16, out); }, "x");
  expect_invalid([&] { qdq_mxfp8_rows(cuda, out); }, "x");
  expect_invalid([&] { qdq_mxfp8_rows(view(a, 64, 48), view(b, 64, 48)); }, "x");
  expect_invalid([&] { qdq_mxfp8_rows(x, view(b, 32, 64)); }, "out");
  expect_invalid([&] { qdq_mxfp8_rows(x, view(a, 64, 64, 64)); }, "out");  // overlaps x
  expect_invalid([&] { qdq_mxfp8_cols(view(a, 64, 12), TensorView{}, view(b, 64, 12)); }, "x");
  expect_invalid([&] { qdq_mxfp8_cols(view(a, 40, 64), TensorView{}, view(b, 40, 64)); }, "x");
  expect_invalid([&] { qdq_mxfp8_cols(x, TensorView{}, view(b, 64, 56)); }, "out");
  expect_invalid([&] { qdq_mxfp8_cols(x, TensorView{}, view(a, 64, 64, 8)); }, "out");
  auto cols = [&](std::vector<int32_t> o) {
    qdq_mxfp8_cols(x, i32(o), out);
  };
  EXPECT_NO_THROW(cols({0, 10, 10, 64}));
  expect_invalid([&] { cols({0}); }, "offsets");           // no expert
  expect_invalid([&] { cols({-1, 10}); }, "offsets");      // negative
  expect_invalid([&] { cols({0, 20, 10}); }, "offsets");   // decreasing
  expect_invalid([&] { cols({0, 10, 65}); }, "offsets");   // past M
  std::vector<int32_t> two_d = {0, 10, 20, 30};
  expect_invalid([&] {
    qdq_mxfp8_cols(x, TensorView::contiguous(two_d.data(), DType::kInt32, {2, 2}), out);
  }, "offsets");
  std::vector<float> float_offsets = {0, 64};
  expect_invalid([&] { qdq_mxfp8_cols(x, f32(float_offsets, {2}), out); }, "offsets");
}

}  // namespace
}  // namespace moefuse::ref
