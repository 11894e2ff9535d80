#include "ref/dispatch.h"

#include <algorithm>
#include <limits>
#include <string>
#include <vector>

#include "moefuse/error.h"
#include "ref/check.h"

namespace moefuse::ref {

int64_t expert_offsets(const TensorView& counts, const TensorView& offsets, int64_t align) {
  expect_i32(counts, "counts", {kAnyExtent});
  const int64_t E = counts.size(0);
  MOEFUSE_EXPECT(E > 0, "counts", "at least one expert", "shape " + shape_string(counts));
  expect_i32(offsets, "offsets", {E + 1});
  MOEFUSE_EXPECT(align >= 1, "align", "a value >= 1", std::to_string(align));
  expect_values_in(counts, "counts", 0, std::numeric_limits<int32_t>::max());
  int64_t row = 0;
  offsets.as<int32_t>()[0] = 0;
  for (int64_t e = 0; e < E; ++e) {
    // Every segment is padded to a multiple of align, so every offsets[e] (offsets[E] included)
    // is one: an exclusive scan of round_up(counts, align).
    row += (counts.as<const int32_t>()[e] + align - 1) / align * align;
    MOEFUSE_EXPECT(row <= std::numeric_limits<int32_t>::max(), "counts",
                   "a padded total that fits int32", std::to_string(row) + " rows");
    offsets.as<int32_t>()[e + 1] = static_cast<int32_t>(row);
  }
  return row;
}

void dispatch_maps(const TensorView& expert_idx, const TensorView& offsets,
                   const TensorView& row_of, const TensorView& token_of_row) {
  expect_i32(expert_idx, "expert_idx", {kAnyExtent, kAnyExtent});
  const int64_t T = expert_idx.size(0), k = expert_idx.size(1);
  expect_i32(offsets, "offsets", {kAnyExtent});
  const int64_t E = offsets.size(0) - 1;
  MOEFUSE_EXPECT(E > 0, "offsets", "shape [E+1] with E >= 1", "shape " + shape_string(offsets));
  expect_i32(row_of, "row_of", {T, k});
  expect_i32(token_of_row, "token_of_row", {kAnyExtent});
  const int64_t R = token_of_row.size(0);
  expect_offsets(offsets, "offsets", E, R);
  expect_values_in(expert_idx, "expert_idx", 0, E);

  const int32_t* idx = expert_idx.as<const int32_t>();
  const int32_t* off = offsets.as<const int32_t>();
  std::vector<int64_t> next(off, off + E);
  std::fill(token_of_row.as<int32_t>(), token_of_row.as<int32_t>() + R, -1);
  // Tokens in increasing order, so each expert's rows come out in token order (stable).
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t j = 0; j < k; ++j) {
      const int e = idx[t * k + j];
      MOEFUSE_EXPECT(next[e] < off[e + 1], "offsets",
                     "room for every assignment of expert " + std::to_string(e) + " (" +
                         std::to_string(off[e + 1] - off[e]) + " rows)",
                     "more assignments in expert_idx");
      row_of.as<int32_t>()[t * k + j] = static_cast<int32_t>(next[e]);
      token_of_row.as<int32_t>()[next[e]++] = static_cast<int32_t>(t);
    }
  }
}

void permute(const TensorView& x, const TensorView& token_of_row, const TensorView& xs) {
  expect_f32(x, "x", {kAnyExtent, kAnyExtent});
  const int64_t T = x.size(0), H = x.size(1);
  expect_i32(token_of_row, "token_of_row", {kAnyExtent});
  const int64_t R = token_of_row.size(0);
  expect_f32(xs, "xs", {R, H});
  expect_values_in(token_of_row, "token_of_row", -1, T);
  for (int64_t r = 0; r < R; ++r) {
    const int32_t t = token_of_row.as<const int32_t>()[r];
    float* dst = xs.as<float>() + r * H;
    if (t < 0) {
      std::fill(dst, dst + H, 0.0f);
    } else {
      std::copy(x.as<const float>() + t * H, x.as<const float>() + (t + 1) * H, dst);
    }
  }
}

void permute_backward(const TensorView& dxs, const TensorView& row_of, const TensorView& dx) {
  expect_f32(dxs, "dxs", {kAnyExtent, kAnyExtent});
  const int64_t R = dxs.size(0), H = dxs.size(1);
  expect_i32(row_of, "row_of", {kAnyExtent, kAnyExtent});
  const int64_t T = row_of.size(0), k = row_of.size(1);
  expect_f32(dx, "dx", {T, H});
  expect_values_in(row_of, "row_of", 0, R);
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t h = 0; h < H; ++h) {
      double sum = 0;
      for (int64_t j = 0; j < k; ++j)
        sum += dxs.as<const float>()[row_of.as<const int32_t>()[t * k + j] * H + h];
      dx.as<float>()[t * H + h] = static_cast<float>(sum);
    }
  }
}

namespace {

// The checks combine and combine_backward share; returns {T, k, R, H}.
struct CombineShape {
  int64_t T, k, R, H;
};
CombineShape check_combine(const TensorView& ys, const TensorView& probs,
                           const TensorView& row_of) {
  expect_f32(ys, "ys", {kAnyExtent, kAnyExtent});
  const int64_t R = ys.size(0), H = ys.size(1);
  expect_f32(probs, "probs", {kAnyExtent, kAnyExtent});
  const int64_t T = probs.size(0), k = probs.size(1);
  expect_i32(row_of, "row_of", {T, k});
  expect_values_in(row_of, "row_of", 0, R);
  return {T, k, R, H};
}

}  // namespace

void combine(const TensorView& ys, const TensorView& probs, const TensorView& row_of,
             const TensorView& y) {
  const auto [T, k, R, H] = check_combine(ys, probs, row_of);
  expect_f32(y, "y", {T, H});
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t h = 0; h < H; ++h) {
      double sum = 0;
      for (int64_t j = 0; j < k; ++j)
        sum += static_cast<double>(probs.as<const float>()[t * k + j]) *
               ys.as<const float>()[row_of.as<const int32_t>()[t * k + j] * H + h];
      y.as<float>()[t * H + h] = static_cast<float>(sum);
    }
  }
}

void combine_backward(const TensorView& dy, const TensorView& ys, const TensorView& probs,
                      const TensorView& row_of, const TensorView& dys, const TensorView& d_probs) {
  const auto [T, k, R, H] = check_combine(ys, probs, row_of);
  expect_f32(dy, "dy", {T, H});
  expect_f32(dys, "dys", {R, H});
  expect_f32(d_probs, "d_probs", {T, k});
  // Accumulated in fp64 so that a row shared by two assignments (not produced by dispatch_maps,
  // but legal here) gets the sum of both.
  std::vector<double> acc(R * H);
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t j = 0; j < k; ++j) {
      const int64_t row = row_of.as<const int32_t>()[t * k + j];
      const double p = probs.as<const float>()[t * k + j];
      double dot = 0;
      for (int64_t h = 0; h < H; ++h) {
        const double g = dy.as<const float>()[t * H + h];
        acc[row * H + h] += p * g;
        dot += g * ys.as<const float>()[row * H + h];
      }
      d_probs.as<float>()[t * k + j] = static_cast<float>(dot);
    }
  }
  std::copy(acc.begin(), acc.end(), dys.as<float>());
}

}  // namespace moefuse::ref
