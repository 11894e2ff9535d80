// moefuse-bench's modes (gemm, dispatch, layer, reference, ...) and their shared option parsing.
//
// Each mode lives in its own file and registers itself with MOEFUSE_BENCH_MODE, so adding one
// touches nothing else.
#pragma once

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <string_view>
#include <vector>

namespace moefuse::bench {

// "--name value" and "--flag" options. Every getter records the option as known; finish() throws
// InvalidArgument for any option given but never asked for (a typo must not pass silently).
class Args {
 public:
  Args(int argc, char** argv, int first);
  std::string get(std::string_view name, std::string_view fallback);
  int64_t get_int(std::string_view name, int64_t fallback, int64_t min, int64_t max);
  double get_double(std::string_view name, double fallback);
  bool flag(std::string_view name);
  void finish() const;
  // The whole command line, for reports (what to run to reproduce a row).
  const std::string& command() const { return command_; }

 private:
  std::string command_;
  std::map<std::string, std::string, std::less<>> values_;
  std::set<std::string, std::less<>> flags_;
  std::set<std::string, std::less<>> known_;
};

struct Mode {
  std::string_view name;
  std::string_view summary;
  std::string_view options;  // the options it reads, for `moefuse-bench MODE --help`
  int (*run)(Args& args);
};

std::vector<Mode>& modes();

// True (after printing why, and that `moefuse-bench reference` runs on the CPU) when no sm_90 GPU
// is present. A GPU mode then returns 0 having measured nothing: on a machine without a GPU the
// main job's answer is that message, not a failure.
bool gpu_missing(std::string_view mode);

struct ModeRegistration {
  explicit ModeRegistration(Mode m) { modes().push_back(m); }
};

#define MOEFUSE_BENCH_MODE(ident, name, summary, options, fn) \
  static ::moefuse::bench::ModeRegistration moefuse_bench_mode_##ident({name, summary, options, fn})

}  // namespace moefuse::bench
