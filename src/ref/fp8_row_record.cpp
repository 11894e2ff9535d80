#include "ref/fp8_row_record.h"

#include <cstring>
#include <string>
#include <vector>

#include "formats/fp8_row_record.h"
#include "moefuse/error.h"
#include "ref/quant.h"

namespace moefuse::ref {
namespace {

// H of records [M, fp8_record_bytes(H)] given the row count and H of the caller's other view.
void expect_records(const TensorView& records, int64_t m, int64_t h) {
  MOEFUSE_EXPECT(h > 0 && h % 16 == 0, "hidden", "a positive multiple of 16", std::to_string(h));
  expect_tensor(records, "records", DType::kUInt8, Device::kCpu,
                {m, formats::fp8_record_bytes(h)});
}

}  // namespace

void pack_fp8_records(const TensorView& x, const TensorView& records,
                      const TensorView& token_of_row) {
  expect_tensor(x, "x", DType::kFloat32, Device::kCpu, {kAnyExtent, kAnyExtent});
  const int64_t m = x.size(0), h = x.size(1), groups = formats::fp8_record_groups(h);
  expect_records(records, m, h);
  const bool owners = !is_absent(token_of_row);
  if (owners) expect_tensor(token_of_row, "token_of_row", DType::kInt32, Device::kCpu, {m});
  std::vector<uint8_t> q(m * h);
  std::vector<float> scales(m * groups);
  quantize_fp8_blockwise_1x128(x, TensorView::contiguous(q.data(), DType::kFloat8E4M3, {m, h}),
                               TensorView::contiguous(scales.data(), DType::kFloat32,
                                                      {m, groups}));
  const int64_t bytes = formats::fp8_record_bytes(h);
  uint8_t* out = records.as<uint8_t>();
  std::memset(out, 0, m * bytes);
  for (int64_t r = 0; r < m; ++r) {
    if (owners && token_of_row.as<const int32_t>()[r] == -1) continue;
    std::memcpy(out + r * bytes, q.data() + r * h, h);
    std::memcpy(out + r * bytes + formats::fp8_record_scales_offset(h), scales.data() + r * groups,
                groups * sizeof(float));
  }
}

void unpack_fp8_records(const TensorView& records, const TensorView& x) {
  expect_tensor(x, "x", DType::kFloat32, Device::kCpu, {kAnyExtent, kAnyExtent});
  const int64_t m = x.size(0), h = x.size(1), groups = formats::fp8_record_groups(h);
  expect_records(records, m, h);
  std::vector<uint8_t> q(m * h);
  std::vector<float> scales(m * groups);
  const int64_t bytes = formats::fp8_record_bytes(h);
  const uint8_t* in = records.as<const uint8_t>();
  for (int64_t r = 0; r < m; ++r) {
    std::memcpy(q.data() + r * h, in + r * bytes, h);
    std::memcpy(scales.data() + r * groups, in + r * bytes + formats::fp8_record_scales_offset(h),
                groups * sizeof(float));
  }
  dequantize_fp8_blockwise_1x128(TensorView::contiguous(q.data(), DType::kFloat8E4M3, {m, h}),
                                 TensorView::contiguous(scales.data(), DType::kFloat32,
                                                        {m, groups}),
                                 x);
}

}  // namespace moefuse::ref
