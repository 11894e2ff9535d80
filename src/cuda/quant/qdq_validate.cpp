#include "cuda/quant/qdq_validate.h"

#include <limits>
#include <string>
#include <string_view>

#include "cuda/gemm/expert_offsets.h"
#include "formats/recipes.h"
#include "moefuse/error.h"
#include "moefuse/quant.h"

namespace moefuse {
namespace {

// x and out [M, *] alike, out in place or apart; the last extent a multiple of `multiple`.
void expect_qdq_pair(const TensorView& x, const TensorView& out, DType dtype, Device device,
                     int64_t multiple, std::string_view why) {
  expect_tensor(x, "x", dtype, device, {kAnyExtent, kAnyExtent});
  MOEFUSE_EXPECT(x.size(1) % multiple == 0, "x",
                 "a last extent that is a multiple of " + std::to_string(multiple) + " (" +
                     std::string(why) + ")",
                 std::to_string(x.size(1)));
  expect_tensor(out, "out", dtype, device, {x.size(0), x.size(1)});
  if (device == Device::kCuda) {
    expect_aligned(x, "x");
    expect_aligned(out, "out");
  }
  // In place is one element's read then write by the same thread; any other overlap races.
  if (out.data != x.data) expect_disjoint(out, "out", x, "x");
}

// offsets for the column blocks of an [m, *] matrix: absent with m % 32 == 0 (returns 0), or
// int32 [E + 1] on `device` (returns E).
int64_t expect_column_offsets(const TensorView& offsets, int64_t m, std::string_view matrix,
                              Device device) {
  MOEFUSE_EXPECT(m <= std::numeric_limits<int32_t>::max(), matrix, "rows (dim 0) below 2^31",
                 std::to_string(m));
  if (is_absent(offsets)) {
    MOEFUSE_EXPECT(m % formats::kMxBlock == 0, matrix,
                   "rows (dim 0) a multiple of 32 when offsets is absent", std::to_string(m));
    return 0;
  }
  return gemm::expect_expert_offsets(offsets, device);
}

}  // namespace

std::pair<int64_t, int64_t> validate_qdq_mxfp8_rows(const TensorView& x, const TensorView& out,
                                                    DType dtype, Device device) {
  expect_qdq_pair(x, out, dtype, device, formats::kMxBlock, "whole 32-element MXFP8 blocks");
  return {x.size(0), x.size(1)};
}

int64_t validate_qdq_mxfp8_cols(const TensorView& x, const TensorView& offsets,
                                const TensorView& out, DType dtype, Device device) {
  expect_qdq_pair(x, out, dtype, device, 8, "16-byte rows");
  const int64_t e = expect_column_offsets(offsets, x.size(0), "x", device);
  if (e > 0) expect_disjoint(out, "out", offsets, "offsets");
  return e;
}

int64_t validate_mxfp8_cols(const TensorView& plain, std::string_view plain_name, DType dtype,
                            const TensorView& offsets, const TensorView& q,
                            const TensorView& scales, Device device,
                            Mxfp8ColsDirection direction) {
  expect_tensor(plain, plain_name, dtype, device, {kAnyExtent, kAnyExtent});
  const int64_t m = plain.size(0), n = plain.size(1);
  MOEFUSE_EXPECT(n % 8 == 0, plain_name, "a last extent that is a multiple of 8 (16-byte rows)",
                 std::to_string(n));
  const int64_t e = expect_column_offsets(offsets, m, plain_name, device);
  expect_tensor(q, "q", DType::kFloat8E4M3, device, {m, n});
  expect_tensor(scales, "scales", DType::kFloat8E8M0, device, {mxfp8_col_blocks(m, e), n});
  if (device == Device::kCuda) {
    expect_aligned(plain, plain_name);
    expect_aligned(q, "q");
    expect_aligned(scales, "scales");
  }
  const NamedView q_scales[] = {{q, "q"}, {scales, "scales"}};
  if (direction == Mxfp8ColsDirection::kQuantize) {
    const NamedView inputs[] = {{plain, plain_name}, {offsets, "offsets"}};
    expect_outputs_disjoint(q_scales, inputs);
  } else {
    const NamedView outputs[] = {{plain, plain_name}};
    const NamedView inputs[] = {{q, "q"}, {scales, "scales"}, {offsets, "offsets"}};
    expect_outputs_disjoint(outputs, inputs);
  }
  return e;
}

}  // namespace moefuse
