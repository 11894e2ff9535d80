// Shared test helpers: fresh random data, error norms, the bad-input expectation, GPU presence.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "moefuse/error.h"

namespace moefuse::test {

// `call` must throw InvalidArgument naming `argument` (the error model's contract for bad input).
template <class Call>
void expect_invalid(Call&& call, const std::string& argument) {
  try {
    std::forward<Call>(call)();
    ADD_FAILURE() << "no InvalidArgument; expected one naming '" << argument << "'";
  } catch (const InvalidArgument& e) {
    EXPECT_EQ(e.argument(), argument) << e.what();
  }
}

// A generator seeded from the test's name and a per-process random value, so every run draws
// fresh data. A failed test prints its seed (test_main.cpp's listener, as
// "[  REPLAY  ] MOEFUSE_TEST_SEED=<seed> --gtest_filter=<test>"); that setting replays the draw.
std::mt19937_64& rng();
uint64_t seed();
// MOEFUSE_TEST_SEED's value: a decimal uint64 (no sign, nothing after it); anything else throws
// std::invalid_argument naming the variable and the text.
uint64_t parse_test_seed(const std::string& text);

std::vector<float> random_normal(size_t n, float stddev = 1.0f, float mean = 0.0f);
// The same from a given generator (deterministic draws: the fuzz harness's cases).
std::vector<float> random_normal(std::mt19937_64& gen, size_t n, float stddev = 1.0f,
                                 float mean = 0.0f);
std::vector<float> random_uniform(size_t n, float lo, float hi);

// ||a - b|| / ||b|| in fp64. Returns +inf if either holds a NaN or an infinity.
double rel_norm_error(std::span<const float> a, std::span<const double> b);
double rel_norm_error(std::span<const float> a, std::span<const float> b);

// Skips the current test (GTEST_SKIP with the reason) unless an sm_90 device is present.
#define MOEFUSE_REQUIRE_HOPPER()                                          \
  do {                                                                    \
    std::string moefuse_why_;                                             \
    if (!::moefuse::test::hopper_present(&moefuse_why_))                  \
      GTEST_SKIP() << "needs an sm_90 GPU: " << moefuse_why_;             \
  } while (0)

bool hopper_present(std::string* why);

// The largest |got[i] - want[i]| and its first index (a NaN counts as the largest), for failure
// messages that name where two results differ most. {0, -1} when both are empty.
struct MaxDiff {
  size_t at = 0;
  double diff = -1;
};
MaxDiff max_abs_diff(std::span<const float> got, std::span<const float> want);

}  // namespace moefuse::test
