// The reference of the fused permute + FP8 quantisation (ref/dispatch_quant.h): every row holds
// its token's x row quantised alone (codes, and scales at the K-major [group, row] entries),
// padding rows are quantised zero rows, the pitch columns are 1; bad views are named.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "moefuse/grouped_gemm_fp8.h"
#include "ref/dispatch_quant.h"
#include "ref/quant.h"
#include "ref_test_helpers.h"

namespace moefuse::test {
namespace {

TensorView e4m3(std::vector<uint8_t>& v, std::initializer_list<int64_t> shape) {
  return TensorView::contiguous(v.data(), DType::kFloat8E4M3, shape);
}

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

TEST(RefDispatchQuant, RowsHoldTheirTokensQuantisedAlone) {
  const int64_t T = 5, H = 272;  // two whole 128-groups and a 16-element tail
  std::vector<float> x = random_normal(T * H, 3.0f);
  // Token 1: an all-zero group; token 2: NaN and -Inf in group 0, tiny values in the tail.
  std::fill(x.begin() + H + 128, x.begin() + H + 256, 0.0f);
  x[2 * H + 3] = kNaN;
  x[2 * H + 7] = -kInf;
  for (int64_t h = 256; h < H; ++h) x[2 * H + h] = 1e-30f * static_cast<float>(h - 260);
  std::vector<int32_t> token_of_row = {3, 0, -1, -1, 2, 1, 4, -1, 0, 2, -1};
  const int64_t R = static_cast<int64_t>(token_of_row.size()), groups = fp8_scale_groups(H),
                pitch = fp8_scale_rows(R);
  ASSERT_EQ(pitch, 12);
  std::vector<uint8_t> q(R * H, 0xAB);
  std::vector<float> scales(groups * pitch, kNaN);
  ref::permute_quantize_fp8(f32(x, {T, H}), i32(token_of_row, {R}), e4m3(q, {R, H}),
                            f32(scales, {groups, pitch}));

  // Each token's row quantised on its own; a zero row for the padding rows.
  std::vector<uint8_t> want_q((T + 1) * H);
  std::vector<float> want_scales((T + 1) * groups), rows(x);
  rows.resize((T + 1) * H, 0.0f);
  ref::quantize_fp8_blockwise_1x128(f32(rows, {T + 1, H}), e4m3(want_q, {T + 1, H}),
                                    f32(want_scales, {T + 1, groups}));
  EXPECT_EQ(want_scales[1 * groups + 1], 1.0f);  // the all-zero group
  EXPECT_TRUE(std::isinf(want_scales[2 * groups + 0]));
  for (int64_t r = 0; r < pitch; ++r) {
    const int64_t t = r < R && token_of_row[r] >= 0 ? token_of_row[r] : T;  // T: the zero row
    SCOPED_TRACE("row " + std::to_string(r) + " token " + std::to_string(t));
    for (int64_t g = 0; g < groups; ++g)
      EXPECT_EQ(scales[g * pitch + r], r < R ? want_scales[t * groups + g] : 1.0f) << "group " << g;
    if (r >= R) continue;
    EXPECT_TRUE(std::equal(q.begin() + r * H, q.begin() + (r + 1) * H, want_q.begin() + t * H));
  }
}

TEST(RefDispatchQuant, RejectsBadViews) {
  const int64_t T = 3, H = 32, R = 6;  // one scale group, pitch 8
  std::vector<float> x = random_normal(T * H), scales(16);
  std::vector<int32_t> tor = {0, 1, 2, -1, 0, 1}, bad_tor = {0, 1, 3, -1, 0, 1}, xi(T * H);
  std::vector<uint8_t> q(R * H);
  const TensorView good_x = f32(x, {T, H}), good_tor = i32(tor, {R}), good_q = e4m3(q, {R, H}),
                   good_scales = f32(scales, {1, 8});
  auto run = [](TensorView x_, TensorView tor_, TensorView q_, TensorView scales_) {
    return [=] { ref::permute_quantize_fp8(x_, tor_, q_, scales_); };
  };
  expect_invalid(run(i32(xi, {T, H}), good_tor, good_q, good_scales), "x");
  expect_invalid(run(good_x, i32(bad_tor, {R}), good_q, good_scales), "token_of_row");
  expect_invalid(run(good_x, good_tor, e4m3(q, {R - 1, H}), good_scales), "xs_fp8");
  expect_invalid(run(good_x, good_tor, good_q, f32(scales, {R, 1})), "xs_scales");  // row-major
  expect_invalid(run(good_x, good_tor, good_q, f32(scales, {1, R})), "xs_scales");  // no padding
  expect_invalid(run(good_x, good_tor, good_q, f32(scales, {2, 8})), "xs_scales");  // 2 groups
}

}  // namespace
}  // namespace moefuse::test
