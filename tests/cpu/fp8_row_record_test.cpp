// FP8 row records (formats/fp8_row_record.h) and their reference (ref/fp8_row_record.h): the
// layout, the round trip, and records moved between simulated ranks.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <vector>

#include "common/fp8_operands.h"
#include "common/test_util.h"
#include "formats/fp8_row_record.h"
#include "ref/ep.h"
#include "ref/fp8_row_record.h"

namespace moefuse {
namespace {

using formats::fp8_record_bytes;

TEST(Fp8RowRecord, CodesThenScalesPaddedTo16Bytes) {
  EXPECT_EQ(fp8_record_bytes(16), 32);      // 16 codes, 1 scale, 12 bytes of padding
  EXPECT_EQ(fp8_record_bytes(2048), 2112);  // qwen3: 16 groups, no padding; bf16 is 4096
  EXPECT_EQ(fp8_record_bytes(2880), 2976);  // gpt-oss: 23 groups (the last of 64), 4 padding
  EXPECT_EQ(fp8_record_bytes(4096), 4224);  // mixtral
  EXPECT_EQ(fp8_record_bytes(7168), 7392);  // deepseek
  EXPECT_EQ(formats::fp8_record_scales_offset(2880), 2880);
  for (int64_t h = 16; h <= 8192; h += 16) ASSERT_LE(fp8_record_bytes(h), 2 * h) << h;
}

// Packing is the 1x128 quantiser's codes and scales; unpacking gives each element within half an
// E4M3 step of x (2^-4 relative to the element, or of the group's smallest normal), padding and
// ownerless rows are zero bytes.
TEST(Fp8RowRecord, RoundTripAndPadding) {
  const int64_t m = 7, h = 2880, bytes = fp8_record_bytes(h);
  std::vector<float> x = test::random_normal(m * h, 3.0f);
  std::vector<int32_t> owner{0, 1, -1, 3, 4, 5, -1};
  std::vector<uint8_t> rec(m * bytes, 0xAB);
  ref::pack_fp8_records(test::host(x.data(), DType::kFloat32, {m, h}),
                        test::host(rec.data(), DType::kUInt8, {m, bytes}),
                        test::host(owner.data(), DType::kInt32, {m}));
  std::vector<float> back(m * h);
  ref::unpack_fp8_records(test::host(rec.data(), DType::kUInt8, {m, bytes}),
                          test::host(back.data(), DType::kFloat32, {m, h}));
  for (int64_t r = 0; r < m; ++r) {
    const uint8_t* row = rec.data() + r * bytes;
    for (int64_t b = h + 4 * formats::fp8_record_groups(h); b < bytes; ++b)
      ASSERT_EQ(row[b], 0) << "padding byte " << b << " of row " << r;
    for (int64_t i = 0; i < h; ++i) {
      const float want = owner[r] == -1 ? 0.0f : x[r * h + i];
      ASSERT_LE(std::abs(back[r * h + i] - want), std::abs(want) / 16 + 1e-2f)
          << "row " << r << " element " << i;
    }
  }
}

TEST(Fp8RowRecord, Fp8ExactRowsComeBackBitForBit) {
  const int64_t m = 5, h = 2880, bytes = fp8_record_bytes(h);
  std::vector<float> x = test::fp8_exact_rows(m, h), back(m * h);
  std::vector<uint8_t> rec(m * bytes);
  ref::pack_fp8_records(test::host(x.data(), DType::kFloat32, {m, h}),
                        test::host(rec.data(), DType::kUInt8, {m, bytes}));
  ref::unpack_fp8_records(test::host(rec.data(), DType::kUInt8, {m, bytes}),
                          test::host(back.data(), DType::kFloat32, {m, h}));
  EXPECT_EQ(std::memcmp(x.data(), back.data(), x.size() * sizeof(float)), 0);
  for (float v : x) ASSERT_EQ(test::bf16_to_float(test::float_to_bf16(v)), v) << "bf16 holds it";
}

// Records are opaque rows to the transfer: what two simulated ranks receive unpacks to exactly
// what their senders packed.
TEST(Fp8RowRecord, RecordsCrossRanksByteForByte) {
  const int R = 2, E = 4, h = 256, bytes = fp8_record_bytes(h);
  const std::vector<std::vector<int32_t>> offs = {{0, 3, 3, 7, 9}, {0, 0, 5, 6, 8}};
  std::vector<int32_t> offsets;
  for (const auto& o : offs) offsets.insert(offsets.end(), o.begin(), o.end());
  std::vector<std::vector<float>> x(R), sent(R);
  std::vector<std::vector<uint8_t>> rec(R), recv(R, std::vector<uint8_t>(17 * bytes));
  std::vector<std::vector<int32_t>> recv_off(R, std::vector<int32_t>(E / R + 1));
  std::vector<TensorView> xs, rv, ro;
  for (int s = 0; s < R; ++s) {
    const int64_t rows = offs[s][E];
    x[s] = test::random_normal(rows * h);
    rec[s].resize(rows * bytes);
    ref::pack_fp8_records(test::host(x[s].data(), DType::kFloat32, {rows, h}),
                          test::host(rec[s].data(), DType::kUInt8, {rows, bytes}));
    sent[s].resize(rows * h);
    ref::unpack_fp8_records(test::host(rec[s].data(), DType::kUInt8, {rows, bytes}),
                            test::host(sent[s].data(), DType::kFloat32, {rows, h}));
    xs.push_back(test::host(rec[s].data(), DType::kUInt8, {rows, bytes}));
    rv.push_back(test::host(recv[s].data(), DType::kUInt8, {17, bytes}));
    ro.push_back(test::host(recv_off[s].data(), DType::kInt32, {E / R + 1}));
  }
  ref::ep_dispatch(test::host(offsets.data(), DType::kInt32, {R, E + 1}), xs, rv, ro);
  // Rank d's expert l: sources 0, 1 in order (ep_layout.h), each its rows of expert d·2 + l.
  for (int d = 0; d < R; ++d) {
    const int64_t got_rows = recv_off[d][E / R];
    std::vector<float> got(got_rows * h);
    ref::unpack_fp8_records(test::host(recv[d].data(), DType::kUInt8, {got_rows, bytes}),
                            test::host(got.data(), DType::kFloat32, {got_rows, h}));
    int64_t row = 0;
    for (int l = 0; l < E / R; ++l)
      for (int s = 0; s < R; ++s)
        for (int32_t i = offs[s][d * 2 + l]; i < offs[s][d * 2 + l + 1]; ++i, ++row)
          ASSERT_EQ(std::memcmp(got.data() + row * h, sent[s].data() + i * h, h * sizeof(float)), 0)
              << "rank " << d << " row " << row;
    EXPECT_EQ(row, got_rows);
  }
}

TEST(Fp8RowRecord, BadViewsAreNamed) {
  std::vector<float> x(3 * 24);
  std::vector<uint8_t> rec(3 * 64);
  std::vector<int32_t> owners(2, 0);
  auto xs = [&](DType dtype, int64_t rows, int64_t h) {
    return test::host(x.data(), dtype, {rows, h});
  };
  auto records = [&](DType dtype, int64_t rows, int64_t bytes) {
    return test::host(rec.data(), dtype, {rows, bytes});
  };
  auto pack = [](const TensorView& x_, const TensorView& rec_, const TensorView& owners_ = {}) {
    return [=] { ref::pack_fp8_records(x_, rec_, owners_); };
  };
  auto unpack = [](const TensorView& rec_, const TensorView& x_) {
    return [=] { ref::unpack_fp8_records(rec_, x_); };
  };
  const DType f32 = DType::kFloat32, u8 = DType::kUInt8;
  test::expect_invalid(pack(xs(f32, 3, 24), records(u8, 3, 64)), "hidden");
  test::expect_invalid(pack(xs(f32, 3, 16), records(u8, 3, 48)), "records");
  test::expect_invalid(pack(xs(DType::kBFloat16, 3, 16), records(u8, 3, 32)), "x");
  test::expect_invalid(pack(xs(f32, 3, 16), records(u8, 3, 32),
                            test::host(owners.data(), DType::kInt32, {2})),
                       "token_of_row");
  test::expect_invalid(unpack(records(u8, 2, 32), xs(f32, 3, 16)), "records");
  test::expect_invalid(unpack(records(u8, 3, 32), xs(DType::kInt32, 3, 16)), "x");
}

}  // namespace
}  // namespace moefuse
