// The CPU reference dispatch: offsets, stable maps, permute/combine and their backward, bad inputs.
#include <gtest/gtest.h>

#include "ref/dispatch.h"
#include "ref_test_helpers.h"

namespace moefuse::test {
namespace {

using ref::combine;
using ref::combine_backward;
using ref::dispatch_maps;
using ref::expert_offsets;
using ref::permute;
using ref::permute_backward;

TEST(RefDispatch, OffsetsWithAndWithoutAlign) {
  std::vector<int32_t> counts = {3, 0, 5, 1}, offsets(5);
  EXPECT_EQ(expert_offsets(i32(counts, {4}), i32(offsets, {5})), 9);
  EXPECT_EQ(offsets, (std::vector<int32_t>{0, 3, 3, 8, 9}));
  EXPECT_EQ(expert_offsets(i32(counts, {4}), i32(offsets, {5}), 4), 16);
  EXPECT_EQ(offsets, (std::vector<int32_t>{0, 4, 4, 12, 16}));
}

TEST(RefDispatch, MapsAreStableTokenOrderWithPaddingRows) {
  // 4 tokens, k = 2, 3 experts; expert 1 gets tokens 0, 2, 3 in that order, expert 2 none.
  std::vector<int32_t> idx = {1, 0, 0, 1, 1, 0, 0, 1}, counts = {4, 4, 0}, offsets(4);
  EXPECT_EQ(expert_offsets(i32(counts, {3}), i32(offsets, {4}), 8), 16);
  std::vector<int32_t> row_of(8), token_of_row(18);
  dispatch_maps(i32(idx, {4, 2}), i32(offsets, {4}), i32(row_of, {4, 2}), i32(token_of_row, {18}));
  EXPECT_EQ(row_of, (std::vector<int32_t>{8, 0, 1, 9, 10, 2, 3, 11}));
  std::vector<int32_t> expect_tokens(18, -1);
  for (int r : {0, 1, 2, 3}) expect_tokens[r] = r;
  for (int r : {8, 9, 10, 11}) expect_tokens[r] = r - 8;
  EXPECT_EQ(token_of_row, expect_tokens);
}

TEST(RefDispatch, PermuteThenCombineRoundTrips) {
  const int64_t T = 13, H = 24, E = 6, k = 2;
  auto x = random_normal(T * H);
  std::vector<int32_t> idx(T * k), counts(E), offsets(E + 1), row_of(T * k);
  std::uniform_int_distribution<int> pick(0, E - 2);
  for (int64_t t = 0; t < T; ++t) {
    idx[t * k] = pick(rng());
    idx[t * k + 1] = E - 1;  // distinct from the first; expert E-1 gets every token
  }
  for (int32_t e : idx) ++counts[e];
  const int64_t R = expert_offsets(i32(counts, {E}), i32(offsets, {E + 1}), 4) + 3;
  std::vector<int32_t> token_of_row(R);
  dispatch_maps(i32(idx, {T, k}), i32(offsets, {E + 1}), i32(row_of, {T, k}),
                i32(token_of_row, {R}));
  std::vector<float> xs(R * H, NAN), y(T * H, NAN), probs(T * k, 0.5f);
  permute(f32(x, {T, H}), i32(token_of_row, {R}), f32(xs, {R, H}));
  for (int64_t r = 0; r < R; ++r)
    if (token_of_row[r] < 0) EXPECT_EQ(xs[r * H], 0.0f) << "padding row " << r;
  combine(f32(xs, {R, H}), f32(probs, {T, k}), i32(row_of, {T, k}), f32(y, {T, H}));
  EXPECT_LT(rel_norm_error(y, x), 1e-7);
  // permute_backward is the adjoint of permute: <permute(x), g> = <x, permute_backward(g)>.
  auto g = random_normal(R * H);
  for (int64_t r = 0; r < R; ++r)
    if (token_of_row[r] < 0) std::fill(g.begin() + r * H, g.begin() + (r + 1) * H, 0.0f);
  std::vector<float> dx(T * H);
  permute_backward(f32(g, {R, H}), i32(row_of, {T, k}), f32(dx, {T, H}));
  EXPECT_NEAR(dot(xs, g), dot(x, dx), 1e-4 * std::sqrt(dot(g, g) * dot(x, x)));
}

TEST(RefDispatch, CombineBackwardMatchesFiniteDifferences) {
  const int64_t T = 13, H = 24, R = 30, k = 2;
  auto ys = random_normal(R * H), probs = random_normal(T * k), dy = random_normal(T * H);
  std::vector<int32_t> row_of(T * k);
  for (int64_t i = 0; i < T * k; ++i) row_of[i] = static_cast<int32_t>(i + 2);  // 0, 1, 28, 29 unused
  std::vector<float> y(T * H), dys(R * H, NAN), d_probs(T * k);
  combine_backward(f32(dy, {T, H}), f32(ys, {R, H}), f32(probs, {T, k}), i32(row_of, {T, k}),
                   f32(dys, {R, H}), f32(d_probs, {T, k}));
  EXPECT_EQ(dys[0], 0.0f);
  EXPECT_EQ(dys[29 * H], 0.0f);
  auto loss = [&]() -> std::optional<double> {
    combine(f32(ys, {R, H}), f32(probs, {T, k}), i32(row_of, {T, k}), f32(y, {T, H}));
    return dot(y, dy);
  };
  // Bilinear: the central difference is exact up to the fp32 rounding of y (6e-8 / 2e-2 step).
  EXPECT_LT(finite_difference(ys, dys, 1e-2, loss).error, 1e-4);
  EXPECT_LT(finite_difference(probs, d_probs, 1e-2, loss).error, 1e-4);
}

TEST(RefDispatch, NoTokens) {
  std::vector<int32_t> idx, counts = {0, 0}, offsets(3), row_of, token_of_row;
  EXPECT_EQ(expert_offsets(i32(counts, {2}), i32(offsets, {3}), 8), 0);
  EXPECT_NO_THROW(dispatch_maps(i32(idx, {0, 2}), i32(offsets, {3}), i32(row_of, {0, 2}),
                                i32(token_of_row, {0})));
  std::vector<float> x, xs, y, probs;
  EXPECT_NO_THROW(permute(f32(x, {0, 4}), i32(token_of_row, {0}), f32(xs, {0, 4})));
  EXPECT_NO_THROW(combine(f32(xs, {0, 4}), f32(probs, {0, 2}), i32(row_of, {0, 2}), f32(y, {0, 4})));
}

TEST(RefDispatch, RejectsBadInputs) {
  const int64_t T = 3, k = 2, E = 3, H = 4;
  std::vector<int32_t> counts = {2, 3, 1}, offsets(E + 1), idx = {0, 1, 1, 2, 0, 1}, row_of(T * k),
                       token_of_row(8);
  std::vector<float> x = random_normal(T * H), xs(8 * H), probs(T * k), y(T * H), d_probs(T * k);
  auto C = i32(counts, {E});
  auto O = i32(offsets, {E + 1});
  expect_invalid([&] { expert_offsets(C, O, 0); }, "align");
  expect_invalid([&] { expert_offsets(C, i32(offsets, {E})); }, "offsets");
  expect_invalid([&] { expert_offsets(i32(counts, {0}), i32(offsets, {1})); }, "counts");
  auto neg = counts;
  neg[1] = -1;
  expect_invalid([&] { expert_offsets(i32(neg, {E}), O); }, "counts");
  expert_offsets(C, O);
  auto I = i32(idx, {T, k});
  auto RO = i32(row_of, {T, k});
  auto TR = i32(token_of_row, {8});
  EXPECT_NO_THROW(dispatch_maps(I, O, RO, TR));
  auto bad = offsets;
  bad[1] = 5, bad[2] = 4;
  expect_invalid([&] { dispatch_maps(I, i32(bad, {E + 1}), RO, TR); }, "offsets");  // decreasing
  bad = offsets;
  bad[3] = 9;
  expect_invalid([&] { dispatch_maps(I, i32(bad, {E + 1}), RO, TR); }, "offsets");  // > rows
  bad = {0, 1, 4, 6};
  expect_invalid([&] { dispatch_maps(I, i32(bad, {E + 1}), RO, TR); }, "offsets");  // no room
  auto idx_bad = idx;
  idx_bad[3] = 3;
  expect_invalid([&] { dispatch_maps(i32(idx_bad, {T, k}), O, RO, TR); }, "expert_idx");
  expect_invalid([&] { dispatch_maps(I, O, i32(row_of, {k, T}), TR); }, "row_of");
  auto TR_gpu = TR;
  TR_gpu.device = Device::kCuda;
  expect_invalid([&] { dispatch_maps(I, O, RO, TR_gpu); }, "token_of_row");

  auto XS = f32(xs, {8, H});
  auto tor_bad = token_of_row;
  tor_bad[2] = T;
  expect_invalid([&] { permute(f32(x, {T, H}), i32(tor_bad, {8}), XS); }, "token_of_row");
  expect_invalid([&] { permute(f32(x, {T, H}), TR, f32(xs, {8, H - 1})); }, "xs");
  auto rows_bad = row_of;
  rows_bad[0] = 8;
  expect_invalid([&] { permute_backward(XS, i32(rows_bad, {T, k}), f32(y, {T, H})); }, "row_of");
  expect_invalid([&] { permute_backward(XS, RO, f32(y, {H, T})); }, "dx");
  auto P = f32(probs, {T, k});
  expect_invalid([&] { combine(XS, P, i32(rows_bad, {T, k}), f32(y, {T, H})); }, "row_of");
  expect_invalid([&] { combine(XS, f32(probs, {k, T}), RO, f32(y, {T, H})); }, "row_of");
  expect_invalid([&] { combine(XS, P, RO, f32(y, {T, H + 1})); }, "y");
  auto P_int = P;
  P_int.dtype = DType::kInt32;
  expect_invalid([&] { combine(XS, P_int, RO, f32(y, {T, H})); }, "probs");
  expect_invalid([&] { combine_backward(f32(y, {H, T}), XS, P, RO, XS, f32(d_probs, {T, k})); },
                 "dy");
  expect_invalid([&] { combine_backward(f32(y, {T, H}), XS, P, RO, f32(xs, {4, 2 * H}), f32(d_probs, {T, k})); },
                 "dys");
  expect_invalid([&] { combine_backward(f32(y, {T, H}), XS, P, RO, XS, f32(d_probs, {T * k})); },
                 "d_probs");
}

}  // namespace
}  // namespace moefuse::test
