#include <cstdio>
#include <cstdlib>
#include <string>

#include "bench/mode.h"
#include "bench/report.h"
#include "cuda/device.h"
#include "moefuse/error.h"

namespace moefuse::bench {

Args::Args(int argc, char** argv, int first) : command_(command_line(argc, argv)) {
  for (int i = first; i < argc; ++i) {
    std::string a = argv[i];
    MOEFUSE_EXPECT(a.rfind("--", 0) == 0, "command line", "options of the form --name [value]",
                   "'" + a + "'");
    std::string name = a.substr(2);
    if (i + 1 < argc && std::string_view(argv[i + 1]).rfind("--", 0) != 0) {
      values_[name] = argv[++i];
    } else {
      flags_.insert(name);
    }
  }
}

std::string Args::get(std::string_view name, std::string_view fallback) {
  known_.emplace(name);
  auto it = values_.find(name);
  MOEFUSE_EXPECT(!flags_.count(name), "--" + std::string(name), "a value", "none");
  return it == values_.end() ? std::string(fallback) : it->second;
}

int64_t Args::get_int(std::string_view name, int64_t fallback, int64_t min, int64_t max) {
  std::string text = get(name, std::to_string(fallback));
  char* end = nullptr;
  long long v = std::strtoll(text.c_str(), &end, 10);
  MOEFUSE_EXPECT(end && *end == '\0' && !text.empty(), "--" + std::string(name), "an integer",
                 "'" + text + "'");
  MOEFUSE_EXPECT(v >= min && v <= max, "--" + std::string(name),
                 "a value in [" + std::to_string(min) + ", " + std::to_string(max) + "]",
                 std::to_string(v));
  return v;
}

double Args::get_double(std::string_view name, double fallback) {
  std::string text = get(name, std::to_string(fallback));
  char* end = nullptr;
  double v = std::strtod(text.c_str(), &end);
  MOEFUSE_EXPECT(end && *end == '\0' && !text.empty(), "--" + std::string(name), "a number",
                 "'" + text + "'");
  return v;
}

bool Args::flag(std::string_view name) {
  known_.emplace(name);
  MOEFUSE_EXPECT(!values_.count(name), "--" + std::string(name), "no value (a flag)",
                 "'" + values_.find(name)->second + "'");
  return flags_.count(name) > 0;
}

void Args::finish() const {
  for (const auto& [name, value] : values_)
    MOEFUSE_EXPECT(known_.count(name), "--" + name, "an option this mode knows", "unknown option");
  for (const auto& name : flags_)
    MOEFUSE_EXPECT(known_.count(name), "--" + name, "an option this mode knows", "unknown option");
}

bool gpu_missing(std::string_view mode) {
  std::string why;
  if (cuda::hopper_available(&why)) return false;
  std::printf("moefuse-bench %.*s needs an sm_90 (Hopper) GPU: %s\n"
              "Nothing was measured. `moefuse-bench reference` runs the CPU reference layer.\n",
              static_cast<int>(mode.size()), mode.data(), why.c_str());
  return true;
}

std::vector<Mode>& modes() {
  static std::vector<Mode> all;
  return all;
}

}  // namespace moefuse::bench
