// The test suites' main: Google Test's, plus a listener that prints how to replay a failed test's
// random draw. Every test draws from test::rng(), seeded by one per-process value (test::seed()),
// so a failure seen once in CI can be rerun on the same numbers from its log alone.
#include <gtest/gtest.h>

#include <cstdio>

#include "common/test_util.h"

namespace {

class ReplaySeedPrinter : public testing::EmptyTestEventListener {
  void OnTestEnd(const testing::TestInfo& info) override {
    if (!info.result()->Failed()) return;
    std::printf("[  REPLAY  ] MOEFUSE_TEST_SEED=%llu --gtest_filter='%s.%s'\n",
                static_cast<unsigned long long>(moefuse::test::seed()), info.test_suite_name(),
                info.name());
    std::fflush(stdout);
  }
};

}  // namespace

int main(int argc, char** argv) {
  testing::InitGoogleTest(&argc, argv);
  testing::UnitTest::GetInstance()->listeners().Append(new ReplaySeedPrinter);
  return RUN_ALL_TESTS();
}
