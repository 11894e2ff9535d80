// The test helpers' MOEFUSE_TEST_SEED parsing (common/test_util.h): a failing test prints its
// seed, and the variable must take that text back exactly or say what is wrong with it.
#include <gtest/gtest.h>

#include <stdexcept>
#include <string>

#include "common/test_util.h"

namespace moefuse {
namespace {

TEST(TestSeed, ParsesWhatAFailingTestPrints) {
  EXPECT_EQ(test::parse_test_seed("15023377507951940243"), 15023377507951940243ull);
  EXPECT_EQ(test::parse_test_seed("0"), 0u);
  EXPECT_EQ(test::parse_test_seed("18446744073709551615"), 18446744073709551615ull);
}

TEST(TestSeed, RejectsAnythingElseNamingTheVariableAndTheText) {
  for (const std::string bad : {"", "abc", "12x", " 12", "-1", "+1", "0x10", "1.5",
                                "18446744073709551616"}) {
    try {
      test::parse_test_seed(bad);
      ADD_FAILURE() << "'" << bad << "' was accepted";
    } catch (const std::invalid_argument& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find("MOEFUSE_TEST_SEED"), std::string::npos) << what;
      EXPECT_NE(what.find("'" + bad + "'"), std::string::npos) << what;
    }
  }
}

// Fails on purpose, so that python/tests/test_replay_line.py can check the line a failed test
// prints (tests/common/test_main.cpp); disabled, it runs only where asked for by name.
TEST(TestSeed, DISABLED_FailsToShowItsReplayLine) { FAIL() << "failed on purpose"; }

}  // namespace
}  // namespace moefuse
