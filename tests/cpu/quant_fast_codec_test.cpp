// The host-side pieces of the GPU quantisers: the fast E2M1 encoder (cuda/quant/e2m1_fast.h)
// against the reference codec, and the grid sizing of the grid-stride kernels (cuda/quant/grid.h).
#include <gtest/gtest.h>

#include <cstdint>
#include <limits>

#include "common/test_util.h"
#include "cuda/quant/e2m1_fast.h"
#include "cuda/quant/grid.h"
#include "formats/fp4.h"

namespace moefuse {
namespace {

bool signalling_nan(uint32_t u) { return (u & 0x7FC00000u) == 0x7F800000u && (u & 0x3FFFFFu) != 0; }

// Every sign, exponent and top 7 mantissa bits, with low 16 bits that sit on and around every
// rounding boundary of E2M1 (ties have the low 20+ bits zero), plus random patterns.
TEST(QuantFastCodec, E2m1MatchesReferenceOnBoundariesAndRandomBits) {
  int64_t bad = 0, checked = 0;
  auto check = [&](uint32_t u) {
    if (signalling_nan(u)) return;
    const float y = formats::bits_float(u);
    const uint32_t got = cuda::quant::e2m1_code_fast(y), want = formats::e2m1_from_float(y);
    ++checked;
    if (got != want && bad++ < 5)
      ADD_FAILURE() << "bits 0x" << std::hex << u << " (" << y << "): fast 0x" << got
                    << ", reference 0x" << want;
  };
  for (uint32_t high = 0; high < 0x10000u; ++high)
    for (uint32_t low : {0x0000u, 0x0001u, 0x7FFFu, 0x8000u, 0x8001u, 0xFFFFu})
      check(high << 16 | low);
  std::uniform_int_distribution<uint32_t> any;
  for (int i = 0; i < 200000; ++i) check(any(test::rng()));
  for (float y : {0.25f, 0.75f, 1.25f, 1.75f, 2.5f, 3.5f, 5.0f, 6.0f, 6.5f, -0.0f, 1e-45f,
                  std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
                  std::numeric_limits<float>::quiet_NaN(), -std::numeric_limits<float>::quiet_NaN()})
    check(formats::float_bits(y));
  EXPECT_EQ(bad, 0) << bad << " of " << checked << " inputs differ";
}

// The 8-at-a-time bf16 packer (host emulation of its PRMT and bf16 min) against the reference
// codec on each product: every bf16 pattern, in each lane position, against random neighbours,
// with multipliers that put the bf16 values on and around the E2M1 rounding boundaries.
TEST(QuantFastCodec, E2m1x8Bf16MatchesReferenceForEveryBf16Pattern) {
  std::uniform_int_distribution<uint32_t> any;
  int64_t bad = 0;
  for (float m : {1.0f, 0.75f, 3.0f, 1.0f / 3.0f, 1e-30f, 3.0e38f, 1.00000012f, 0.99999994f}) {
    for (uint32_t v = 0; v < 0x10000u; ++v) {
      uint32_t w[4];
      for (uint32_t& x : w) x = any(test::rng());
      const int k = int(v % 8);  // lane of v, varied with the pattern
      w[k / 2] = k % 2 == 0 ? (w[k / 2] & 0xFFFF0000u) | v : (w[k / 2] & 0xFFFFu) | v << 16;
      const uint32_t got = cuda::quant::e2m1x8_bf16(w, m);
      for (int j = 0; j < 8; ++j) {
        const uint32_t h = (w[j / 2] >> (16 * (j % 2))) & 0xFFFFu;
        const uint32_t want = formats::e2m1_from_float(formats::bits_float(h << 16) * m);
        if (((got >> (4 * j)) & 0xFu) != want && bad++ < 5)
          ADD_FAILURE() << "bf16 0x" << std::hex << h << " times " << m << ": fast 0x"
                        << ((got >> (4 * j)) & 0xFu) << ", reference 0x" << want;
      }
    }
  }
  EXPECT_EQ(bad, 0);
}

TEST(QuantGrid, GridStrideCtasCoversWorkCapsAtFullOccupancyAndNeverZero) {
  using cuda::quant::grid_stride_ctas;
  using cuda::quant::kMaxCtasPerSm;
  EXPECT_EQ(grid_stride_ctas(0, 8, 132), 1);  // NVFP4 still writes its tensor scale
  EXPECT_EQ(grid_stride_ctas(1, 8, 132), 1);
  EXPECT_EQ(grid_stride_ctas(8, 8, 132), 1);
  EXPECT_EQ(grid_stride_ctas(9, 8, 132), 2);
  EXPECT_EQ(grid_stride_ctas(37, 8, 132), 5);
  EXPECT_EQ(grid_stride_ctas(16384, 8, 132), 132 * kMaxCtasPerSm);
  EXPECT_EQ(grid_stride_ctas(int64_t(1) << 40, 2048, 132), 132 * kMaxCtasPerSm);
  // Brute force: the grid never exceeds the cap, and grid * per_cta covers the work unless capped.
  for (int sms : {1, 3, 132})
    for (int64_t per : {1, 8, 512})
      for (int64_t items = 0; items < 3000; items += 7) {
        const int64_t g = grid_stride_ctas(items, per, sms);
        ASSERT_GE(g, 1);
        ASSERT_LE(g, std::max<int64_t>(1, int64_t(sms) * kMaxCtasPerSm));
        if (g < int64_t(sms) * kMaxCtasPerSm) {
          ASSERT_GE(g * per, items) << items << " items, " << per << " per CTA, " << sms << " SMs";
          ASSERT_LT((g - 1) * per, std::max<int64_t>(items, 1));
        }
      }
}

}  // namespace
}  // namespace moefuse
