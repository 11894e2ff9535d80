// FP8 E4M3 / E5M2 codecs against values derived independently from the bit fields, hand-written
// literals, rounding edge cases and a brute-force nearest-value oracle.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "common/test_util.h"
#include "formats/fp8.h"

namespace moefuse::formats {
namespace {

// The value of an E4M3 code from its fields, in double (independent of the codec).
double e4m3_field_value(int c) {
  const int s = c >> 7, e = (c >> 3) & 0xF, m = c & 0x7;
  if (e == 0xF && m == 0x7) return std::numeric_limits<double>::quiet_NaN();
  const double mag = e == 0 ? std::ldexp(m / 8.0, -6) : std::ldexp(1.0 + m / 8.0, e - 7);
  return s ? -mag : mag;
}

double e5m2_field_value(int c) {
  const int s = c >> 7, e = (c >> 2) & 0x1F, m = c & 0x3;
  double mag;
  if (e == 0x1F) {
    mag = m == 0 ? std::numeric_limits<double>::infinity() : std::numeric_limits<double>::quiet_NaN();
  } else {
    mag = e == 0 ? std::ldexp(m / 4.0, -14) : std::ldexp(1.0 + m / 4.0, e - 15);
  }
  return s ? -mag : mag;
}

void expect_same_value(float got, double want, int code) {
  if (std::isnan(want)) {
    EXPECT_TRUE(std::isnan(got)) << "code 0x" << std::hex << code;
    return;
  }
  EXPECT_EQ(static_cast<double>(got), want) << "code 0x" << std::hex << code;
  EXPECT_EQ(std::signbit(got), std::signbit(want)) << "sign of code 0x" << std::hex << code;
}

TEST(FormatE4M3, EveryCodeDecodesToItsFieldValue) {
  for (int c = 0; c < 256; ++c) expect_same_value(e4m3_to_float(uint8_t(c)), e4m3_field_value(c), c);
}

TEST(FormatE4M3, HandWrittenValues) {
  struct Case { uint8_t code; float value; };
  const Case cases[] = {
      {0x00, 0.0f},        {0x01, 0x1p-9f},       {0x02, 0x1p-8f},     {0x06, 6 * 0x1p-9f},
      {0x07, 7 * 0x1p-9f}, {0x08, 0x1p-6f},       {0x09, 1.125f * 0x1p-6f},
      {0x30, 0.5f},        {0x38, 1.0f},          {0x39, 1.125f},      {0x3C, 1.5f},
      {0x3F, 1.875f},      {0x40, 2.0f},          {0x44, 3.0f},        {0x77, 240.0f},
      {0x78, 256.0f},      {0x79, 288.0f},        {0x7D, 416.0f},      {0x7E, 448.0f},
      {0xB8, -1.0f},       {0xFE, -448.0f},       {0x81, -0x1p-9f},
  };
  for (const auto& c : cases) {
    EXPECT_EQ(e4m3_to_float(c.code), c.value) << "code 0x" << std::hex << int(c.code);
    EXPECT_EQ(e4m3_from_float(c.value), c.code) << "value " << c.value;
  }
  EXPECT_TRUE(std::isnan(e4m3_to_float(0x7F)));
  EXPECT_TRUE(std::isnan(e4m3_to_float(0xFF)));
  EXPECT_TRUE(std::signbit(e4m3_to_float(0x80)));
  EXPECT_EQ(e4m3_to_float(0x80), 0.0f);
}

TEST(FormatE4M3, EveryCodeRoundTrips) {
  for (int c = 0; c < 256; ++c) {
    const uint8_t want = (c & 0x7F) == 0x7F ? kFp8CanonicalNaN : uint8_t(c);
    EXPECT_EQ(e4m3_from_float(e4m3_to_float(uint8_t(c))), want) << "code 0x" << std::hex << c;
  }
}

TEST(FormatE4M3, RoundsToNearestEvenAndSaturates) {
  struct Case { float in; uint8_t code; };
  const Case cases[] = {
      {1.0625f, 0x38},                             // tie 1.0 | 1.125 -> even mantissa 0
      {std::nextafter(1.0625f, 2.0f), 0x39},       // just above the tie
      {std::nextafter(1.0625f, 0.0f), 0x38},       // just below the tie
      {1.1875f, 0x3A},                             // tie 1.125 | 1.25 -> even mantissa 2
      {std::nextafter(1.1875f, 0.0f), 0x39},
      {1.9375f, 0x40},                             // tie 1.875 | 2.0 carries into the exponent
      {0x1p-10f, 0x00},                            // half the smallest subnormal: tie -> 0
      {std::nextafter(0x1p-10f, 1.0f), 0x01},
      {3 * 0x1p-10f, 0x02},                        // 1.5 units -> 2
      {5 * 0x1p-10f, 0x02},                        // 2.5 units -> 2
      {15 * 0x1p-10f, 0x08},                       // 7.5 units -> 8 = 2^-6, the smallest normal
      {std::nextafter(15 * 0x1p-10f, 0.0f), 0x07},
      {-3 * 0x1p-10f, 0x82},
      {448.0f, 0x7E},
      {464.0f, 0x7E},                              // tie 448 | 480: saturate either way
      {470.0f, 0x7E},
      {1e10f, 0x7E},
      {std::numeric_limits<float>::max(), 0x7E},
      {-std::numeric_limits<float>::max(), 0xFE},
      {std::numeric_limits<float>::infinity(), 0x7E},
      {-std::numeric_limits<float>::infinity(), 0xFE},
      {std::numeric_limits<float>::quiet_NaN(), 0x7F},
      {-std::numeric_limits<float>::quiet_NaN(), 0x7F},
      {-0.0f, 0x80},
      {1e-30f, 0x00},
      {-1e-30f, 0x80},
      {std::numeric_limits<float>::denorm_min(), 0x00},
  };
  for (const auto& c : cases)
    EXPECT_EQ(e4m3_from_float(c.in), c.code) << "input " << c.in << " (" << std::hexfloat << c.in << ")";
}

TEST(FormatE5M2, EveryCodeDecodesToItsFieldValueAndRoundTrips) {
  for (int c = 0; c < 256; ++c) {
    expect_same_value(e5m2_to_float(uint8_t(c)), e5m2_field_value(c), c);
    const int mag = c & 0x7F;
    const uint8_t want = mag > 0x7C ? kFp8CanonicalNaN
                         : mag == 0x7C ? uint8_t((c & 0x80) | kE5M2MaxCode)  // Inf saturates
                                       : uint8_t(c);
    EXPECT_EQ(e5m2_from_float(e5m2_to_float(uint8_t(c))), want) << "code 0x" << std::hex << c;
  }
}

TEST(FormatE5M2, HandWrittenValuesAndRounding) {
  EXPECT_EQ(e5m2_to_float(0x3C), 1.0f);
  EXPECT_EQ(e5m2_to_float(0x3E), 1.5f);
  EXPECT_EQ(e5m2_to_float(0x40), 2.0f);
  EXPECT_EQ(e5m2_to_float(0x01), 0x1p-16f);
  EXPECT_EQ(e5m2_to_float(0x03), 3 * 0x1p-16f);
  EXPECT_EQ(e5m2_to_float(0x04), 0x1p-14f);
  EXPECT_EQ(e5m2_to_float(0x7A), 49152.0f);
  EXPECT_EQ(e5m2_to_float(0x7B), 57344.0f);
  EXPECT_EQ(e5m2_to_float(0x7C), std::numeric_limits<float>::infinity());
  EXPECT_EQ(e5m2_to_float(0xFC), -std::numeric_limits<float>::infinity());
  EXPECT_TRUE(std::isnan(e5m2_to_float(0x7D)));
  EXPECT_TRUE(std::isnan(e5m2_to_float(0xFF)));
  EXPECT_EQ(e5m2_from_float(1.125f), 0x3C);    // tie 1.0 | 1.25 -> even
  EXPECT_EQ(e5m2_from_float(1.375f), 0x3E);    // tie 1.25 | 1.5 -> even
  EXPECT_EQ(e5m2_from_float(0x1p-17f), 0x00);  // half the smallest subnormal
  EXPECT_EQ(e5m2_from_float(3 * 0x1p-17f), 0x02);
  EXPECT_EQ(e5m2_from_float(61440.0f), 0x7B);  // tie 57344 | 65536: saturates
  EXPECT_EQ(e5m2_from_float(1e9f), 0x7B);
  EXPECT_EQ(e5m2_from_float(std::numeric_limits<float>::infinity()), 0x7B);
  EXPECT_EQ(e5m2_from_float(-std::numeric_limits<float>::infinity()), 0xFB);
  EXPECT_EQ(e5m2_from_float(std::numeric_limits<float>::quiet_NaN()), 0x7F);
  EXPECT_EQ(e5m2_from_float(-0.0f), 0x80);
}

// Brute force: the encoder must pick the nearest finite code (ties to the even code), saturate
// beyond the maximum, and keep the sign, for random fp32 inputs over the whole range.
template <class Encode>
void check_nearest(Encode encode, double (*field_value)(int), int max_code, int sign_bit) {
  std::vector<double> table;
  for (int c = 0; c <= max_code; ++c) table.push_back(field_value(c));
  ASSERT_TRUE(std::is_sorted(table.begin(), table.end()));
  auto& gen = test::rng();
  for (int i = 0; i < 200000; ++i) {
    uint32_t bits = static_cast<uint32_t>(gen());
    if (i % 2) bits = (bits & 0x807FFFFFu) | ((100u + bits % 50u) << 23);  // near the format's range
    const float x = formats::bits_float(bits);
    if (std::isnan(x)) continue;
    const double a = std::fabs(static_cast<double>(x));
    int want;
    if (a >= table.back()) {
      want = max_code;
    } else {
      const int hi = int(std::upper_bound(table.begin(), table.end(), a) - table.begin());
      const int lo = hi - 1;
      const double d_lo = a - table[lo], d_hi = table[hi] - a;
      want = d_lo < d_hi ? lo : d_hi < d_lo ? hi : (lo % 2 == 0 ? lo : hi);
    }
    if (std::signbit(x)) want |= sign_bit;
    ASSERT_EQ(int(encode(x)), want) << "input " << std::hexfloat << x;
  }
}

TEST(FormatE4M3, NearestCodeForRandomInputs) {
  check_nearest([](float x) { return e4m3_from_float(x); }, e4m3_field_value, kE4M3MaxCode, 0x80);
}

TEST(FormatE5M2, NearestCodeForRandomInputs) {
  check_nearest([](float x) { return e5m2_from_float(x); }, e5m2_field_value, kE5M2MaxCode, 0x80);
}

}  // namespace
}  // namespace moefuse::formats
