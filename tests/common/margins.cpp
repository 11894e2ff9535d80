#include "common/margins.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "common/test_util.h"

namespace moefuse::test {

void record_margin(const std::string& what, double error, double bound) {
  const char* path = std::getenv("MOEFUSE_TEST_MARGINS");
  if (path == nullptr || *path == '\0') return;
  const testing::TestInfo* info = testing::UnitTest::GetInstance()->current_test_info();
  const std::string test =
      info ? std::string(info->test_suite_name()) + "." + info->name() : std::string("-");
  char numbers[128];
  std::snprintf(numbers, sizeof numbers, "\t%.6g\t%.6g\t%.6g\t%llu\n", error, bound,
                bound > 0 ? error / bound : INFINITY, static_cast<unsigned long long>(seed()));
  const std::string line = test + "\t" + what + numbers;
  const int fd = ::open(path, O_WRONLY | O_CREAT | O_APPEND, 0644);
  if (fd < 0) {
    ADD_FAILURE() << "MOEFUSE_TEST_MARGINS: cannot open '" << path << "'";
    return;
  }
  const ssize_t wrote = ::write(fd, line.data(), line.size());
  ::close(fd);
  if (wrote != static_cast<ssize_t>(line.size()))
    ADD_FAILURE() << "MOEFUSE_TEST_MARGINS: short write to '" << path << "'";
}

}  // namespace moefuse::test
