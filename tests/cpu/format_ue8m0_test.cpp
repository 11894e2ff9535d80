// UE8M0 scale codec: every code, exponent encoding with clamping, rounding up of non-powers of two.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "formats/ue8m0.h"

namespace moefuse::formats {
namespace {

TEST(FormatUE8M0, EveryCodeDecodes) {
  for (int c = 0; c < 255; ++c) {
    EXPECT_EQ(static_cast<double>(ue8m0_to_float(uint8_t(c))), std::ldexp(1.0, c - 127)) << c;
    EXPECT_EQ(ue8m0_to_float(uint8_t(c)) * ue8m0_reciprocal(uint8_t(c)), 1.0f) << c;
  }
  EXPECT_TRUE(std::isnan(ue8m0_to_float(0xFF)));
  EXPECT_EQ(ue8m0_to_float(127), 1.0f);
  EXPECT_EQ(ue8m0_to_float(0), 0x1p-127f);
  EXPECT_EQ(ue8m0_to_float(254), 0x1p127f);
}

TEST(FormatUE8M0, FromExponentClamps) {
  for (int k = -127; k <= 127; ++k) EXPECT_EQ(ue8m0_from_exponent(k), k + 127);
  EXPECT_EQ(ue8m0_from_exponent(-300), 0);
  EXPECT_EQ(ue8m0_from_exponent(300), 254);
}

TEST(FormatUE8M0, CeilKeepsPowersOfTwoAndRoundsOthersUp) {
  for (int k = -127; k <= 127; ++k) {
    const float p = std::ldexp(1.0f, k);
    EXPECT_EQ(ue8m0_ceil(p), k + 127) << "2^" << k;
    if (k < 127) {
      EXPECT_EQ(ue8m0_ceil(std::nextafter(p, std::numeric_limits<float>::infinity())), k + 128) << "just above 2^" << k;
      EXPECT_EQ(ue8m0_ceil(1.5f * p), k + 128) << "1.5 * 2^" << k;
    }
  }
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(ue8m0_ceil(0.0f), 0);
  EXPECT_EQ(ue8m0_ceil(-0.0f), 0);
  EXPECT_EQ(ue8m0_ceil(0x1p-140f), 0);
  EXPECT_EQ(ue8m0_ceil(std::numeric_limits<float>::denorm_min()), 0);
  EXPECT_EQ(ue8m0_ceil(1.5f * 0x1p-127f), 1);  // fp32 subnormal above 2^-127
  EXPECT_EQ(ue8m0_ceil(1.5f * 0x1p127f), 254);
  EXPECT_EQ(ue8m0_ceil(std::numeric_limits<float>::max()), 254);
  EXPECT_EQ(ue8m0_ceil(inf), 254);
  EXPECT_EQ(ue8m0_ceil(std::numeric_limits<float>::quiet_NaN()), 255);
  EXPECT_EQ(ue8m0_ceil(-1.0f), 255);
  EXPECT_EQ(ue8m0_ceil(-inf), 255);
}

}  // namespace
}  // namespace moefuse::formats
