// moefuse-bench: the main job. `moefuse-bench [MODE] [--options]`; `moefuse-bench help` lists the
// modes, `moefuse-bench MODE --help` a mode's options.
#include <cstdio>
#include <exception>
#include <string>
#include <string_view>

#include "bench/ep_forward.h"
#include "bench/mode.h"

namespace {

// The default run: the whole MoE layer on the GPU (qwen3-30b-a3b); without a GPU it says so and
// points to `moefuse-bench reference`, the CPU reference of a small layer.
constexpr std::string_view kDefaultMode = "layer";

void print_help() {
  std::printf("usage: moefuse-bench [MODE] [--option value ...]\n\nmodes:\n");
  for (const auto& m : moefuse::bench::modes())
    std::printf("  %-14s %.*s\n", std::string(m.name).c_str(), static_cast<int>(m.summary.size()),
                m.summary.data());
  std::printf("  %-14s %s\n", "ep",
              "expert parallelism over N GPUs (--ep N): runs moefuse-ep-bench");
  std::printf("\nWith no MODE: %s. `moefuse-bench MODE --help` lists a mode's options.\n",
              std::string(kDefaultMode).c_str());
}

void print_mode_help(const moefuse::bench::Mode& m) {
  std::printf("usage: moefuse-bench %s %s\n\n%s\n", std::string(m.name).c_str(),
              std::string(m.options).c_str(), std::string(m.summary).c_str());
}

bool is_help_flag(std::string_view arg) { return arg == "--help" || arg == "-h"; }

}  // namespace

int main(int argc, char** argv) {
  if (moefuse::bench::wants_ep(argc, argv)) return moefuse::bench::exec_ep_bench(argc, argv);
  if (argc > 1 && (is_help_flag(argv[1]) || std::string_view(argv[1]) == "help")) {
    print_help();
    return 0;
  }
  std::string_view mode_name = kDefaultMode;
  int first = 1;
  if (argc > 1 && std::string_view(argv[1]).rfind("--", 0) != 0) {
    mode_name = argv[1];
    first = 2;
  }
  for (const auto& m : moefuse::bench::modes()) {
    if (m.name != mode_name) continue;
    // --help anywhere after the mode prints its options.
    for (int i = first; i < argc; ++i) {
      if (!is_help_flag(argv[i])) continue;
      print_mode_help(m);
      return 0;
    }
    try {
      moefuse::bench::Args args(argc, argv, first);
      return m.run(args);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "moefuse-bench %s: %s\n", std::string(mode_name).c_str(), e.what());
      return 2;
    }
  }
  std::fprintf(stderr, "moefuse-bench: unknown mode '%s'\n\n", std::string(mode_name).c_str());
  print_help();
  return 2;
}
