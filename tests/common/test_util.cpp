#include "common/test_util.h"

#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <stdexcept>
#include <string>

#include "cuda/device.h"

namespace moefuse::test {

uint64_t parse_test_seed(const std::string& text) {
  char* end = nullptr;
  errno = 0;
  const unsigned long long v = std::strtoull(text.c_str(), &end, 10);
  if (text.empty() || !std::isdigit(static_cast<unsigned char>(text[0])) || *end != '\0' ||
      errno == ERANGE)
    throw std::invalid_argument("MOEFUSE_TEST_SEED: expected a decimal seed as a failing test "
                                "prints it (0 .. 2^64 - 1), got '" + text + "'");
  return uint64_t{v};
}

uint64_t seed() {
  static const uint64_t s = [] {
    if (const char* fixed = std::getenv("MOEFUSE_TEST_SEED")) return parse_test_seed(fixed);
    return std::random_device{}() ^ (uint64_t{std::random_device{}()} << 32);
  }();
  return s;
}

std::mt19937_64& rng() {
  static std::mt19937_64 gen;
  static const testing::TestInfo* seeded_for = nullptr;
  const testing::TestInfo* now = testing::UnitTest::GetInstance()->current_test_info();
  if (now != seeded_for) {
    seeded_for = now;
    uint64_t s = seed();
    if (now) s ^= std::hash<std::string>{}(std::string(now->test_suite_name()) + now->name());
    gen.seed(s);
  }
  return gen;
}

std::vector<float> random_normal(size_t n, float stddev, float mean) {
  return random_normal(rng(), n, stddev, mean);
}

std::vector<float> random_normal(std::mt19937_64& gen, size_t n, float stddev, float mean) {
  std::normal_distribution<float> dist(mean, stddev);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(gen);
  return v;
}

std::vector<float> random_uniform(size_t n, float lo, float hi) {
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(rng());
  return v;
}

namespace {
template <class B>
double rel_norm(std::span<const float> a, std::span<const B> b) {
  if (a.size() != b.size()) return std::numeric_limits<double>::infinity();
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    if (!std::isfinite(a[i]) || !std::isfinite(static_cast<double>(b[i])))
      return std::numeric_limits<double>::infinity();
    double d = static_cast<double>(a[i]) - static_cast<double>(b[i]);
    num += d * d;
    den += static_cast<double>(b[i]) * static_cast<double>(b[i]);
  }
  if (den == 0) return num == 0 ? 0.0 : std::numeric_limits<double>::infinity();
  return std::sqrt(num / den);
}
}  // namespace

double rel_norm_error(std::span<const float> a, std::span<const double> b) { return rel_norm(a, b); }
double rel_norm_error(std::span<const float> a, std::span<const float> b) { return rel_norm(a, b); }

bool hopper_present(std::string* why) { return cuda::hopper_available(why); }

MaxDiff max_abs_diff(std::span<const float> got, std::span<const float> want) {
  MaxDiff m;
  for (size_t i = 0; i < got.size(); ++i) {
    const double diff = std::abs(double(got[i]) - double(want[i]));
    if (!(diff <= m.diff)) m = {.at = i, .diff = diff};
  }
  return m;
}

}  // namespace moefuse::test
