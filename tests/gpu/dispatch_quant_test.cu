// GPU permute_quantize_fp8 vs the CPU reference (ref/dispatch_quant.h: the permute, then the
// 1x128 quantiser, scales transposed K-major), codes and scales bit for bit (and its FP8 row
// records variant against ref/fp8_row_record.h, with the records' decoder): T 0..16384, H 64
// (many tokens a group) to 7168 (one token a group), H % 128 != 0 (a short last group), padded
// maps (align 8), rows of every token with all-zero, NaN, Inf, tiny and huge groups; outputs
// poisoned first (0xFF: a NaN scale and the E4M3 code 0xFF, neither of which is ever written).
// A bad row_of or token_of_row entry sets the health flag.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include "common/test_util.h"
#include "gpu/dispatch_test_util.h"
#include "moefuse/dispatch.h"
#include "moefuse/grouped_gemm_fp8.h"
#include "cuda/quant/fp8_records.h"
#include "formats/fp8_row_record.h"
#include "moefuse/health.h"
#include "ref/dispatch_quant.h"
#include "ref/fp8_row_record.h"

namespace moefuse {
namespace {

using test::Bf16;
using test::DeviceBuffer;

struct Case {
  int64_t T, H, E, k, align;
  std::string name() const {
    return "T=" + std::to_string(T) + " H=" + std::to_string(H) + " E=" + std::to_string(E) +
           " k=" + std::to_string(k) + " align=" + std::to_string(align);
  }
};

const Case kCases[] = {{1, 2048, 8, 2, 1},     {37, 2048, 64, 8, 1},   {4096, 2880, 128, 4, 8},
                       {16384, 64, 16, 2, 1},  {300, 7168, 32, 4, 1},  {64, 528, 512, 16, 8},
                       {5, 16, 4, 3, 8},       {0, 256, 8, 2, 8},
                       // ~660 one-token-group blocks for 4096 groups: each block walks ~6
                       // groups, so both x stages, both code buffers and both mbarrier parities
                       // are reused (the cases above reach at most a block's third group).
                       {4096, 7168, 32, 2, 1}};

// Random bf16 rows; in every few tokens one group is special: all zero, holding a NaN, an Inf,
// or scaled to tiny (multiplier capped at FLT_MAX) or huge magnitudes.
std::vector<float> special_rows(int64_t T, int64_t H) {
  std::vector<float> x = test::random_normal(T * H);
  const int64_t groups = fp8_scale_groups(H);
  for (int64_t t = 0; t < T; ++t) {
    const int64_t g = t % groups, h0 = g * 128, h1 = std::min(H, h0 + 128);
    float* row = x.data() + t * H;
    switch (t % 6) {
      case 1: std::fill(row + h0, row + h1, 0.0f); break;
      case 2: row[h1 - 1] = std::numeric_limits<float>::quiet_NaN(); break;
      case 3: row[h0] = (t % 12 == 3 ? 1 : -1) * std::numeric_limits<float>::infinity(); break;
      case 4: for (int64_t h = h0; h < h1; ++h) row[h] *= 1e-38f; break;
      case 5: for (int64_t h = h0; h < h1; ++h) row[h] *= 1e36f; break;
      default: break;
    }
  }
  return test::bf16_rounded(x);
}

// Bitwise comparison of the codes [R, H] and K-major scales [groups, pitch], naming the first
// mismatch by row, column / group and token, with the number of mismatches.
::testing::AssertionResult same_quantised(const std::vector<uint8_t>& q,
                                          const std::vector<uint8_t>& want_q,
                                          const std::vector<float>& scales,
                                          const std::vector<float>& want_scales, int64_t H,
                                          int64_t pitch, const std::vector<int32_t>& token_of_row) {
  auto token = [&](int64_t r) {
    return r < static_cast<int64_t>(token_of_row.size()) ? std::to_string(token_of_row[r])
                                                          : std::string("(pitch padding)");
  };
  std::ostringstream first;
  int64_t bad = 0;
  for (size_t i = 0; i < q.size(); ++i) {
    if (q[i] == want_q[i]) continue;
    if (bad++ == 0)
      first << "code of row " << i / H << " (token " << token(i / H) << ") column " << i % H
            << ": got 0x" << std::hex << +q[i] << ", want 0x" << +want_q[i] << std::dec << "; ";
  }
  for (size_t i = 0; i < scales.size(); ++i) {
    if (std::memcmp(&scales[i], &want_scales[i], sizeof(float)) == 0) continue;
    if (bad++ == 0)
      first << "scale of row " << i % pitch << " (token " << token(i % pitch) << ") group "
            << i / pitch << ": got " << scales[i] << ", want " << want_scales[i] << "; ";
  }
  if (bad == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << first.str() << bad << " mismatches in all";
}

TEST(DispatchQuant, PermuteQuantizeFp8MatchesReferenceBitwise) {
  MOEFUSE_REQUIRE_HOPPER();
  for (const Case& c : kCases) {
    SCOPED_TRACE(c.name() + " seed=" + std::to_string(test::seed()));
    test::RefMaps m = test::make_ref_maps(c.T, c.E, c.k, c.align);
    const int64_t T = c.T, H = c.H, k = c.k, R = m.R, groups = fp8_scale_groups(H),
                  pitch = fp8_scale_rows(R);
    std::vector<float> x = special_rows(T, H), want_scales(groups * pitch);
    std::vector<uint8_t> want_q(R * H);
    ref::permute_quantize_fp8(test::host_view(x, DType::kFloat32, {T, H}),
                              test::host_view(m.token_of_row, DType::kInt32, {R}),
                              test::host_view(want_q, DType::kFloat8E4M3, {R, H}),
                              test::host_view(want_scales, DType::kFloat32, {groups, pitch}));
    DeviceBuffer<Bf16> g_x(test::to_bf16(x));
    DeviceBuffer<uint8_t> g_q(R * H);
    DeviceBuffer<float> g_scales(groups * pitch);
    DeviceBuffer<int32_t> g_row_of(m.row_of), g_tor(m.token_of_row), health(1);
    const auto hv = health.view(DType::kInt32, {1});
    reset_health_flags(hv, nullptr);
    g_q.poison(), g_scales.poison();
    permute_quantize_fp8(g_x.view(DType::kBFloat16, {T, H}), g_row_of.view(DType::kInt32, {T, k}),
                         g_tor.view(DType::kInt32, {R}), g_q.view(DType::kFloat8E4M3, {R, H}),
                         g_scales.view(DType::kFloat32, {groups, pitch}), hv, nullptr);
    EXPECT_TRUE(same_quantised(g_q.download(), want_q, g_scales.download(), want_scales, H, pitch,
                               m.token_of_row));
    EXPECT_EQ(read_health_flags(hv, nullptr), 0);
  }
}

// x's rows in xs order (a zero row where token_of_row is -1), as ref::pack_fp8_records reads them.
std::vector<float> permuted_rows(const std::vector<float>& x, const std::vector<int32_t>& tor,
                                 int64_t H) {
  std::vector<float> xs(tor.size() * H, 0.0f);
  for (size_t r = 0; r < tor.size(); ++r)
    if (tor[r] >= 0) std::copy_n(x.data() + tor[r] * H, H, xs.data() + r * H);
  return xs;
}

// The FP8 dispatch's records (formats/fp8_row_record.h), bit for bit ref::pack_fp8_records of
// the permuted rows: codes, scales, zero padding, all-zero padding rows; records poisoned first.
TEST(DispatchQuant, PermuteQuantizeFp8RecordsMatchesReferenceBitwise) {
  MOEFUSE_REQUIRE_HOPPER();
  for (const Case& c : kCases) {
    SCOPED_TRACE(c.name() + " seed=" + std::to_string(test::seed()));
    test::RefMaps m = test::make_ref_maps(c.T, c.E, c.k, c.align);
    const int64_t T = c.T, H = c.H, k = c.k, R = m.R, bytes = formats::fp8_record_bytes(H);
    std::vector<float> x = special_rows(T, H), xs = permuted_rows(x, m.token_of_row, H);
    std::vector<uint8_t> want(R * bytes);
    ref::pack_fp8_records(test::host_view(xs, DType::kFloat32, {R, H}),
                          test::host_view(want, DType::kUInt8, {R, bytes}),
                          test::host_view(m.token_of_row, DType::kInt32, {R}));
    DeviceBuffer<Bf16> g_x(test::to_bf16(x));
    DeviceBuffer<uint8_t> g_rec(R * bytes);
    DeviceBuffer<int32_t> g_row_of(m.row_of), g_tor(m.token_of_row), health(1);
    const auto hv = health.view(DType::kInt32, {1});
    reset_health_flags(hv, nullptr);
    g_rec.poison();
    permute_quantize_fp8_records(g_x.view(DType::kBFloat16, {T, H}),
                                 g_row_of.view(DType::kInt32, {T, k}),
                                 g_tor.view(DType::kInt32, {R}),
                                 g_rec.view(DType::kUInt8, {R, bytes}), hv, nullptr);
    EXPECT_TRUE(test::same_bits(g_rec.download(), want, "records"));
    EXPECT_EQ(read_health_flags(hv, nullptr), 0);
  }
}

// The receiving end: records of local experts [first, end) back to bf16 rows, the range read
// from device offsets, every other row untouched (poisoned before, poisoned after).
TEST(DispatchQuant, UnpackFp8RecordsMatchesReference) {
  MOEFUSE_REQUIRE_HOPPER();
  for (int64_t H : {16, 2048, 2880}) {
    SCOPED_TRACE("H=" + std::to_string(H) + " seed=" + std::to_string(test::seed()));
    const int64_t C = 700, bytes = formats::fp8_record_bytes(H);
    const std::vector<int32_t> offsets = {0, 130, 130, 411, 650, 699};  // 5 local experts
    const int first = 1, end = 4;  // rows [130, 650)
    std::vector<float> x = special_rows(C, H);
    std::vector<uint8_t> rec(C * bytes);
    ref::pack_fp8_records(test::host_view(x, DType::kFloat32, {C, H}),
                          test::host_view(rec, DType::kUInt8, {C, bytes}));
    std::vector<float> want(C * H);
    ref::unpack_fp8_records(test::host_view(rec, DType::kUInt8, {C, bytes}),
                            test::host_view(want, DType::kFloat32, {C, H}));
    DeviceBuffer<uint8_t> g_rec(rec);
    DeviceBuffer<int32_t> g_off(offsets);
    DeviceBuffer<Bf16> g_x(C * H);
    g_x.poison();
    cuda::unpack_fp8_records(g_rec.view(DType::kUInt8, {C, bytes}),
                             g_off.view(DType::kInt32, {6}), first, end,
                             g_x.view(DType::kBFloat16, {C, H}), nullptr);
    const std::vector<Bf16> got = g_x.download();
    const std::vector<Bf16> want_bf16 = test::to_bf16(want);
    for (int64_t r = 0; r < C; ++r) {
      const bool in = r >= offsets[first] && r < offsets[end];
      for (int64_t i = 0; i < H; ++i) {
        uint16_t g, w;
        std::memcpy(&g, &got[r * H + i], 2);
        std::memcpy(&w, &want_bf16[r * H + i], 2);
        const auto nan = [](uint16_t b) { return (b & 0x7F80) == 0x7F80 && (b & 0x7F) != 0; };
        if (in)
          ASSERT_TRUE(g == w || (nan(g) && nan(w)))
              << "row " << r << " element " << i << ": got 0x" << std::hex << g << ", want 0x"
              << w;
        else
          ASSERT_EQ(g, 0xFFFF) << "row " << r << " outside the range was written";
      }
    }
  }
}

TEST(DispatchQuant, BadRowSetsHealthFlag) {
  MOEFUSE_REQUIRE_HOPPER();
  const int64_t T = 4, H = 256, k = 2, R = 8;
  DeviceBuffer<Bf16> x(test::to_bf16(test::random_normal(T * H)));
  DeviceBuffer<uint8_t> q(R * H);
  DeviceBuffer<float> scales(2 * R);
  DeviceBuffer<int32_t> health(1);
  const auto hv = health.view(DType::kInt32, {1});
  auto run = [&](const std::vector<int32_t>& row_of, const std::vector<int32_t>& tor) {
    DeviceBuffer<int32_t> g_row_of(row_of), g_tor(tor);
    reset_health_flags(hv, nullptr);
    permute_quantize_fp8(x.view(DType::kBFloat16, {T, H}), g_row_of.view(DType::kInt32, {T, k}),
                         g_tor.view(DType::kInt32, {R}), q.view(DType::kFloat8E4M3, {R, H}),
                         scales.view(DType::kFloat32, {2, R}), hv, nullptr);
    return read_health_flags(hv, nullptr);
  };
  const std::vector<int32_t> row_of = {0, 1, 2, 3, 4, 5, 6, 7}, tor = {0, 0, 1, 1, 2, 2, 3, 3};
  EXPECT_EQ(run(row_of, tor), 0);
  std::vector<int32_t> bad_row_of = row_of;
  bad_row_of[5] = 99;
  EXPECT_EQ(run(bad_row_of, tor), kHealthRowOutOfRange);
  for (int32_t entry : {static_cast<int32_t>(T), -2}) {
    SCOPED_TRACE("token_of_row[5] = " + std::to_string(entry));
    std::vector<int32_t> bad_tor = tor;
    bad_tor[5] = entry;
    EXPECT_EQ(run(row_of, bad_tor), kHealthRowOutOfRange);
  }
}

}  // namespace
}  // namespace moefuse
