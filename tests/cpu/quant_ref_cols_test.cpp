// CPU reference of the MXFP8 column layout (ref::quantize_mxfp8_cols / dequantize_mxfp8_cols)
// against the row quantiser: each expert's rows transposed, quantize_mxfp8 along them (a short
// last block allowed), and the codes and scales compared place by place with the column layout's
// (code [r, n], scale [block_start[e] + b, n]): an expectation built without the reference's
// Tiling. Wide-range data with NaN, Inf and all-zero blocks; empty experts, offsets[0] > 0, rows
// outside the offsets and scale rows past the block count untouched, the offsets-absent form;
// the round trip equals qdq_mxfp8_cols; every bad argument named.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "common/test_util.h"
#include "moefuse/quant.h"
#include "ref/quant.h"

namespace moefuse::ref {
namespace {

using test::expect_invalid;

constexpr uint8_t kPoisonByte = 0xA5;

TensorView f32(std::vector<float>& v, std::initializer_list<int64_t> shape) {
  return TensorView::contiguous(v.data(), DType::kFloat32, shape);
}
TensorView bytes(std::vector<uint8_t>& v, DType dtype, std::initializer_list<int64_t> shape) {
  return TensorView::contiguous(v.data(), dtype, shape);
}
TensorView i32(std::vector<int32_t>& v) {
  return TensorView::contiguous(v.data(), DType::kInt32, {static_cast<int64_t>(v.size())});
}

// Normal values times 2^U(-20, 20) per 4 rows of a column, an all-zero block, NaN and +-Inf.
std::vector<float> wide_data(int64_t m, int64_t n) {
  auto v = test::random_normal(m * n);
  const auto e = test::random_uniform(m * n / 4 + 1, -20.0f, 20.0f);
  for (int64_t i = 0; i < m * n; ++i)
    v[i] = std::ldexp(v[i], static_cast<int>(e[(i / n / 4) * n / 4 + i % n / 4]));
  if (m >= 64 && n >= 8) {
    for (int64_t r = 32; r < 64; ++r) v[r * n + 3] = 0.0f;
    v[5 * n + 1] = std::numeric_limits<float>::quiet_NaN();
    v[7 * n + 2] = std::numeric_limits<float>::infinity();
    v[40 * n + 6] = -std::numeric_limits<float>::infinity();
  }
  return v;
}

struct Layout {
  std::vector<uint8_t> q, scales;
};

Layout quantize_cols(std::vector<float>& x, int64_t m, int64_t n, std::vector<int32_t>* offsets) {
  const int64_t e = offsets ? static_cast<int64_t>(offsets->size()) - 1 : 0;
  const int64_t blocks = mxfp8_col_blocks(m, e);
  Layout l{std::vector<uint8_t>(m * n, kPoisonByte), std::vector<uint8_t>(blocks * n, kPoisonByte)};
  quantize_mxfp8_cols(f32(x, {m, n}), offsets ? i32(*offsets) : TensorView{},
                      bytes(l.q, DType::kFloat8E4M3, {m, n}),
                      bytes(l.scales, DType::kFloat8E8M0, {blocks, n}));
  return l;
}

// Rows [first, first + rows) of x [*, n] quantised along each column by quantize_mxfp8 of the
// transpose: they must be l's codes there and its scale rows from `block` on.
void expect_matrix(const std::vector<float>& x, int64_t n, int64_t first, int64_t rows,
                   int64_t block, const Layout& l) {
  if (rows == 0) return;
  const int64_t groups = (rows + 31) / 32;
  std::vector<float> t(n * rows);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < n; ++c) t[c * rows + r] = x[(first + r) * n + c];
  std::vector<uint8_t> q(n * rows), scales(n * groups);
  quantize_mxfp8(f32(t, {n, rows}), bytes(q, DType::kFloat8E4M3, {n, rows}),
                 bytes(scales, DType::kFloat8E8M0, {n, groups}));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < n; ++c)
      ASSERT_EQ(l.q[(first + r) * n + c], q[c * rows + r]) << "row " << first + r << " col " << c;
  for (int64_t b = 0; b < groups; ++b)
    for (int64_t c = 0; c < n; ++c)
      ASSERT_EQ(l.scales[(block + b) * n + c], scales[c * groups + b])
          << "block " << block + b << " col " << c;
}

TEST(QuantRefCols, ExpertBlocksAreEachExpertsTransposedRowQuantisation) {
  const int64_t n = 24;
  // Empty experts (first, middle, last), short blocks, a 32-row expert, offsets[0] > 0, spare
  // rows past offsets[E].
  std::vector<int32_t> offsets = {5, 5, 75, 75, 107, 108, 150, 150};
  const int64_t m = 160, e = static_cast<int64_t>(offsets.size()) - 1;
  std::vector<float> x = wide_data(m, n);
  const Layout l = quantize_cols(x, m, n, &offsets);
  int64_t block = 0;
  for (int64_t i = 0; i < e; ++i) {
    expect_matrix(x, n, offsets[i], offsets[i + 1] - offsets[i], block, l);
    block += (offsets[i + 1] - offsets[i] + 31) / 32;
  }
  auto untouched = [](const uint8_t* p, int64_t count) {
    for (int64_t i = 0; i < count; ++i)
      if (p[i] != kPoisonByte) return false;
    return true;
  };
  EXPECT_TRUE(untouched(l.q.data(), offsets.front() * n)) << "rows before offsets[0]";
  EXPECT_TRUE(untouched(l.q.data() + offsets.back() * n, (m - offsets.back()) * n))
      << "rows past offsets[E]";
  EXPECT_EQ(block, 7);  // 3 + 1 + 1 + 2
  EXPECT_TRUE(untouched(l.scales.data() + block * n, (mxfp8_col_blocks(m, e) - block) * n))
      << "scale rows past the block count";
}

TEST(QuantRefCols, WithoutOffsetsBlocksRunFromRowZero) {
  const int64_t m = 96, n = 16;
  std::vector<float> x = wide_data(m, n);
  const Layout l = quantize_cols(x, m, n, nullptr);
  for (int64_t b = 0; b < m / 32; ++b) expect_matrix(x, n, 32 * b, 32, b, l);
}

TEST(QuantRefCols, RoundTripIsTheQuantiseDequantisePass) {
  const int64_t m = 130, n = 32;
  std::vector<int32_t> offsets = {0, 33, 33, 97, 128};
  std::vector<float> x = wide_data(m, n);
  Layout l = quantize_cols(x, m, n, &offsets);
  std::vector<float> back(m * n, 0.0f), want(m * n, 0.0f);
  dequantize_mxfp8_cols(bytes(l.q, DType::kFloat8E4M3, {m, n}), i32(offsets),
                        bytes(l.scales, DType::kFloat8E8M0, {mxfp8_col_blocks(m, 4), n}),
                        f32(back, {m, n}));
  qdq_mxfp8_cols(f32(x, {m, n}), i32(offsets), f32(want, {m, n}));
  for (int64_t i = 0; i < m * n; ++i)
    ASSERT_TRUE(std::memcmp(&back[i], &want[i], 4) == 0 ||
                (std::isnan(back[i]) && std::isnan(want[i])))
        << "element " << i << ": " << back[i] << " vs " << want[i];
}

TEST(QuantRefCols, RejectsBadArguments) {
  const int64_t m = 64, n = 16;
  std::vector<float> x(m * n, 1.0f);
  std::vector<uint8_t> q(m * n), scales(4 * n);
  std::vector<int32_t> offsets = {0, 30, 64};
  auto call = [&](TensorView xv, TensorView qv, TensorView sv, TensorView ov) {
    return [=] { quantize_mxfp8_cols(xv, ov, qv, sv); };
  };
  const TensorView xv = f32(x, {m, n}), ov = i32(offsets);
  const TensorView qv = bytes(q, DType::kFloat8E4M3, {m, n});
  const TensorView sv = bytes(scales, DType::kFloat8E8M0, {mxfp8_col_blocks(m, 2), n});
  EXPECT_NO_THROW(call(xv, qv, sv, ov)());
  // Scales sized for blocks from row 0 (two), not for two experts' restarts (three).
  expect_invalid(call(xv, qv, bytes(scales, DType::kFloat8E8M0, {2, n}), ov), "scales");
  expect_invalid(call(xv, bytes(q, DType::kFloat8E4M3, {m - 1, n}), sv, ov), "q");
  expect_invalid(call(xv, bytes(q, DType::kUInt8, {m, n}), sv, ov), "q");
  expect_invalid(call(f32(x, {m, 12}), bytes(q, DType::kFloat8E4M3, {m, 12}),
                      bytes(scales, DType::kFloat8E8M0, {mxfp8_col_blocks(m, 2), 12}), ov),
                 "x");  // 12 columns: not 16-byte rows
  expect_invalid(call(f32(x, {m - 1, n}), bytes(q, DType::kFloat8E4M3, {m - 1, n}),
                      bytes(scales, DType::kFloat8E8M0, {1, n}), TensorView{}),
                 "x");  // no offsets: rows a multiple of 32
  std::vector<int32_t> decreasing = {0, 40, 30};
  expect_invalid(call(xv, qv, sv, i32(decreasing)), "offsets");
  // The codes over x's own bytes.
  expect_invalid(call(xv, TensorView::contiguous(x.data(), DType::kFloat8E4M3, {m, n}), sv, ov),
                 "q");
}

}  // namespace
}  // namespace moefuse::ref
