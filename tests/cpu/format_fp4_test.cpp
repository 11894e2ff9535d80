// FP4 E2M1 codec: all 16 codes written out by hand, rounding ties, saturation, packing.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "formats/fp4.h"

namespace moefuse::formats {
namespace {

constexpr float kE2M1Values[16] = {0.0f,  0.5f,  1.0f,  1.5f,  2.0f,  3.0f,  4.0f,  6.0f,
                                   -0.0f, -0.5f, -1.0f, -1.5f, -2.0f, -3.0f, -4.0f, -6.0f};

TEST(FormatE2M1, EveryCodeDecodesAndRoundTrips) {
  for (int c = 0; c < 16; ++c) {
    EXPECT_EQ(e2m1_to_float(uint8_t(c)), kE2M1Values[c]) << "code " << c;
    EXPECT_EQ(std::signbit(e2m1_to_float(uint8_t(c))), c >= 8) << "code " << c;
    EXPECT_EQ(e2m1_from_float(kE2M1Values[c]), c) << "value " << kE2M1Values[c];
  }
  EXPECT_EQ(e2m1_to_float(0xF7), 6.0f) << "the high nibble is ignored";
}

TEST(FormatE2M1, RoundsToNearestEvenAndSaturates) {
  const float inf = std::numeric_limits<float>::infinity();
  struct Case { float in; uint8_t code; };
  const Case cases[] = {
      {0.25f, 0x0},  {std::nextafter(0.25f, 1.0f), 0x1}, {0.75f, 0x2},  // 0.5|1.0 -> 1.0
      {std::nextafter(0.75f, 0.0f), 0x1}, {1.25f, 0x2},  // 1.0|1.5 -> 1.0
      {1.75f, 0x4},  // 1.5|2.0 -> 2.0
      {2.5f, 0x4},   // 2|3 -> 2
      {3.5f, 0x6},   // 3|4 -> 4
      {5.0f, 0x6},   // 4|6 -> 4
      {std::nextafter(5.0f, 6.0f), 0x7}, {6.5f, 0x7}, {7.0f, 0x7}, {1e20f, 0x7},
      {inf, 0x7},    {-inf, 0xF},  {-5.5f, 0xF}, {-2.6f, 0xD}, {-0.0f, 0x8},
      {1e-30f, 0x0}, {-1e-30f, 0x8},
      {std::numeric_limits<float>::quiet_NaN(), 0x7},
  };
  for (const auto& c : cases) EXPECT_EQ(e2m1_from_float(c.in), c.code) << "input " << c.in;
}

TEST(FormatE2M1, PacksLowNibbleFirst) {
  EXPECT_EQ(pack_e2m1x2(0x7, 0x9), 0x97);
  EXPECT_EQ(pack_e2m1x2(0xF1, 0x12), 0x21) << "only the low nibbles of the codes";
}

}  // namespace
}  // namespace moefuse::formats
