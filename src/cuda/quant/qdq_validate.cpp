#include "cuda/quant/qdq_validate.h"

#include <limits>
#include <string>
#include <string_view>

#include "cuda/gemm/expert_offsets.h"
#include "formats/recipes.h"
#include "moefuse/error.h"

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

}  // namespace

std::pair<int64_t, int64_t> validate_qdq_mxfp8_rows(const TensorView& x, const TensorView& out,
                                                    DType dtype, Device device) {
  expect_qdq_pair(x, out, dtype, device, formats::kMxBlock, "whole 32-element MXFP8 blocks");
  return {x.size(0), x.size(1)};
}

int64_t validate_qdq_mxfp8_cols(const TensorView& x, const TensorView& offsets,
                                const TensorView& out, DType dtype, Device device) {
  expect_qdq_pair(x, out, dtype, device, 8, "16-byte rows");
  const int64_t m = x.size(0);
  MOEFUSE_EXPECT(m <= std::numeric_limits<int32_t>::max(), "x", "rows (dim 0) below 2^31",
                 std::to_string(m));
  if (is_absent(offsets)) {
    MOEFUSE_EXPECT(m % formats::kMxBlock == 0, "x",
                   "rows (dim 0) a multiple of 32 when offsets is absent", std::to_string(m));
    return 0;
  }
  const int64_t e = gemm::expect_expert_offsets(offsets, device);
  expect_disjoint(out, "out", offsets, "offsets");
  return e;
}

}  // namespace moefuse
