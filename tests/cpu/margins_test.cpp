// record_margin (common/margins.h): the line it appends with MOEFUSE_TEST_MARGINS set, nothing
// without it, and a failure naming the file it cannot open.
#include <gtest/gtest-spi.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

#include "common/margins.h"
#include "common/test_util.h"

namespace moefuse::test {
namespace {

// Sets MOEFUSE_TEST_MARGINS for one scope and restores what was there.
class MarginsFile {
 public:
  explicit MarginsFile(const std::string& path) : path_(path) {
    if (const char* old = std::getenv("MOEFUSE_TEST_MARGINS")) old_ = old, had_ = true;
    ::setenv("MOEFUSE_TEST_MARGINS", path.c_str(), 1);
    std::remove(path.c_str());
  }
  ~MarginsFile() {
    std::remove(path_.c_str());
    if (had_) ::setenv("MOEFUSE_TEST_MARGINS", old_.c_str(), 1);
    else ::unsetenv("MOEFUSE_TEST_MARGINS");
  }
  std::string contents() const {
    std::ifstream in(path_);
    std::stringstream s;
    s << in.rdbuf();
    return s.str();
  }

 private:
  std::string path_, old_;
  bool had_ = false;
};

std::string temp_path(const char* name) {
  return testing::TempDir() + name + std::to_string(::getpid());
}

TEST(Margins, AppendsOneLinePerCheck) {
  MarginsFile file(temp_path("margins_append_"));
  record_margin("d_w1", 0.0015, 0.002);
  record_margin("y", 0.0, 0.02);
  const std::string seed_text = std::to_string(seed());
  EXPECT_EQ(file.contents(),
            "Margins.AppendsOneLinePerCheck\td_w1\t0.0015\t0.002\t0.75\t" + seed_text + "\n" +
                "Margins.AppendsOneLinePerCheck\ty\t0\t0.02\t0\t" + seed_text + "\n");
}

TEST(Margins, WritesNothingWithoutTheVariable) {
  const std::string path = temp_path("margins_unset_");
  MarginsFile file(path);
  ::unsetenv("MOEFUSE_TEST_MARGINS");
  record_margin("d_w1", 0.001, 0.002);
  EXPECT_FALSE(std::ifstream(path).good());
}

TEST(Margins, AFileItCannotOpenIsAFailureNamingIt) {
  MarginsFile file("/nonexistent-dir/margins");
  EXPECT_NONFATAL_FAILURE(record_margin("d_w1", 0.001, 0.002),
                          "MOEFUSE_TEST_MARGINS: cannot open '/nonexistent-dir/margins'");
}

}  // namespace
}  // namespace moefuse::test
