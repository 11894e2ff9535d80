#include "cuda/dispatch/dispatch_args.h"

#include <cstdint>
#include <string>

#include "cuda/router/checks.h"
#include "formats/fp8_row_record.h"
#include "moefuse/error.h"
#include "moefuse/grouped_gemm_fp8.h"
#include "moefuse/router.h"

namespace moefuse::cuda {
namespace {

constexpr int64_t kMaxAlign = 1 << 16;

// A bf16 activation [rows, H]: H a positive multiple of 8 and a 16-byte aligned pointer, so
// every row is whole 16-byte vectors. `hidden` kAnyExtent takes H from the tensor.
int64_t expect_rows(const TensorView& t, std::string_view name, int64_t rows, int64_t hidden) {
  expect_device(t, name, DType::kBFloat16, {rows, hidden});
  const int64_t H = t.size(1);
  MOEFUSE_EXPECT(H > 0 && H % 8 == 0, name, "a hidden size that is a positive multiple of 8",
                 "shape " + shape_string(t));
  expect_aligned(t, name);
  return H;
}

// row_of [T, k] int32 with k in 1..kDispatchMaxTopK; returns {T, k}.
std::pair<int64_t, int64_t> expect_row_of(const TensorView& row_of, int64_t tokens) {
  expect_device(row_of, "row_of", DType::kInt32, {tokens, kAnyExtent});
  expect_in_range(row_of.size(1), "row_of.shape[1]", 1, kDispatchMaxTopK);
  expect_in_range(row_of.size(0), "row_of.shape[0]", 0, INT32_MAX / kDispatchMaxTopK);
  return {row_of.size(0), row_of.size(1)};
}

// The inputs of a quantising permute: x [T, H] with H % 16 == 0, row_of [T, k], token_of_row [R]
// with R <= max_rows.
RowsShape check_quantising_permute(const TensorView& x, const TensorView& row_of,
                                   const TensorView& token_of_row, int64_t max_rows) {
  const int64_t H = expect_rows(x, "x", kAnyExtent, kAnyExtent);
  MOEFUSE_EXPECT(H % 16 == 0, "x", "a hidden size that is a multiple of 16 (16-byte E4M3 rows)",
                 "shape " + shape_string(x));
  const auto [T, k] = expect_row_of(row_of, x.size(0));
  expect_device(token_of_row, "token_of_row", DType::kInt32, {kAnyExtent});
  const int64_t R = token_of_row.size(0);
  expect_in_range(R, "token_of_row.shape[0]", 0, max_rows);
  return {.tokens = T, .top_k = k, .rows = R, .hidden = H};
}

}  // namespace

void check_expert_offsets(const TensorView& counts, const TensorView& offsets, int64_t align) {
  expect_device(counts, "counts", DType::kInt32, {kAnyExtent});
  const int64_t E = counts.size(0);
  expect_in_range(E, "counts.shape[0]", 1, kDispatchMaxExperts);
  expect_device(offsets, "offsets", DType::kInt32, {E + 1});
  expect_in_range(align, "align", 1, kMaxAlign);
}

MapsShape check_dispatch_maps(const TensorView& expert_idx, int64_t num_experts, int64_t align,
                              const DispatchMaps& maps) {
  expect_device(expert_idx, "expert_idx", DType::kInt32, {kAnyExtent, kAnyExtent});
  const int64_t T = expert_idx.size(0), k = expert_idx.size(1);
  expect_in_range(k, "expert_idx.shape[1]", 1, kDispatchMaxTopK);
  expect_in_range(T, "expert_idx.shape[0]", 0, INT32_MAX / kDispatchMaxTopK);
  expect_in_range(num_experts, "num_experts", 1, kDispatchMaxExperts);
  expect_in_range(align, "align", 1, kMaxAlign);
  expect_device(maps.offsets, "offsets", DType::kInt32, {num_experts + 1});
  expect_device(maps.row_of, "row_of", DType::kInt32, {T, k});
  expect_device(maps.token_of_row, "token_of_row", DType::kInt32, {kAnyExtent});
  const int64_t R = maps.token_of_row.size(0);
  MOEFUSE_EXPECT(R >= T * k, "token_of_row",
                 "at least T·k = " + std::to_string(T * k) + " rows", std::to_string(R) + " rows");
  MOEFUSE_EXPECT(R + num_experts * (align - 1) <= INT32_MAX, "token_of_row",
                 "rows + E·(align - 1) that fit int32", std::to_string(R) + " rows");
  return {.tokens = T, .top_k = k, .experts = num_experts, .rows = R};
}

RowsShape check_permute(const TensorView& x, const TensorView& row_of,
                        const TensorView& token_of_row, const TensorView& xs) {
  const int64_t H = expect_rows(x, "x", kAnyExtent, kAnyExtent);
  const auto [T, k] = expect_row_of(row_of, x.size(0));
  expect_device(token_of_row, "token_of_row", DType::kInt32, {kAnyExtent});
  const int64_t R = token_of_row.size(0);
  expect_in_range(R, "token_of_row.shape[0]", 0, INT32_MAX);
  expect_rows(xs, "xs", R, H);
  return {.tokens = T, .top_k = k, .rows = R, .hidden = H};
}

RowsShape check_permute_quantize_fp8(const TensorView& x, const TensorView& row_of,
                                     const TensorView& token_of_row, const TensorView& xs_fp8,
                                     const TensorView& xs_scales) {
  // The scale pitch fp8_scale_rows(R) must fit int32 too.
  const RowsShape s = check_quantising_permute(x, row_of, token_of_row, INT32_MAX - 3);
  expect_device(xs_fp8, "xs_fp8", DType::kFloat8E4M3, {s.rows, s.hidden});
  expect_aligned(xs_fp8, "xs_fp8");
  expect_device(xs_scales, "xs_scales", DType::kFloat32,
                {fp8_scale_groups(s.hidden), fp8_scale_rows(s.rows)});
  expect_aligned(xs_scales, "xs_scales");
  return s;
}

RowsShape check_permute_quantize_fp8_records(const TensorView& x, const TensorView& row_of,
                                             const TensorView& token_of_row,
                                             const TensorView& records) {
  const RowsShape s = check_quantising_permute(x, row_of, token_of_row, INT32_MAX);
  expect_device(records, "records", DType::kUInt8, {s.rows, formats::fp8_record_bytes(s.hidden)});
  expect_aligned(records, "records");
  return s;
}

RowsShape check_permute_backward(const TensorView& dxs, const TensorView& row_of,
                                 const TensorView& dx) {
  const int64_t H = expect_rows(dxs, "dxs", kAnyExtent, kAnyExtent);
  const int64_t R = dxs.size(0);
  expect_in_range(R, "dxs.shape[0]", 0, INT32_MAX);
  const auto [T, k] = expect_row_of(row_of, kAnyExtent);
  expect_rows(dx, "dx", T, H);
  return {.tokens = T, .top_k = k, .rows = R, .hidden = H};
}

RowsShape check_combine(const TensorView& ys, const TensorView& probs, const TensorView& row_of,
                        const TensorView& y) {
  const int64_t H = expect_rows(ys, "ys", kAnyExtent, kAnyExtent);
  const int64_t R = ys.size(0);
  expect_in_range(R, "ys.shape[0]", 0, INT32_MAX);
  const auto [T, k] = expect_row_of(row_of, kAnyExtent);
  if (!is_absent(probs)) expect_device(probs, "probs", DType::kFloat32, {T, k});
  expect_rows(y, "y", T, H);
  return {.tokens = T, .top_k = k, .rows = R, .hidden = H};
}

void check_added_term(const TensorView& add, const RowsShape& s, const TensorView& out,
                      std::string_view out_name) {
  expect_rows(add, "add", s.tokens, s.hidden);
  if (add.data != out.data) expect_disjoint(add, "add", out, out_name);
}

int64_t check_router_dx_term(const TensorView& d_logits, const TensorView& w_router,
                             const RowsShape& s) {
  expect_device(d_logits, "d_logits", DType::kFloat32, {s.tokens, kAnyExtent});
  const int64_t E = d_logits.size(1);
  expect_in_range(E, "d_logits.shape[1]", 1, kRouterMaxExperts);
  expect_device(w_router, "w_router", DType::kBFloat16, {E, s.hidden});
  expect_aligned(w_router, "w_router");
  return E;
}

RowsShape check_combine_backward(const TensorView& dy, const TensorView& ys,
                                 const TensorView& probs, const TensorView& row_of,
                                 const TensorView& token_of_row, const TensorView& dys,
                                 const TensorView& d_probs) {
  const int64_t H = expect_rows(dy, "dy", kAnyExtent, kAnyExtent);
  const auto [T, k] = expect_row_of(row_of, dy.size(0));
  expect_device(token_of_row, "token_of_row", DType::kInt32, {kAnyExtent});
  const int64_t R = token_of_row.size(0);
  expect_in_range(R, "token_of_row.shape[0]", 0, INT32_MAX);
  expect_rows(dys, "dys", R, H);
  const bool weighted = !is_absent(probs);
  if (weighted) {
    expect_device(probs, "probs", DType::kFloat32, {T, k});
    expect_rows(ys, "ys", R, H);
    expect_device(d_probs, "d_probs", DType::kFloat32, {T, k});
  } else {
    MOEFUSE_EXPECT(is_absent(d_probs), "d_probs", "an empty view when probs is empty",
                   "shape " + shape_string(d_probs));
  }
  return {.tokens = T, .top_k = k, .rows = R, .hidden = H};
}

}  // namespace moefuse::cuda
