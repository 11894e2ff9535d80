#include "bench/ep_forward.h"

#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

namespace moefuse::bench {

bool wants_ep(int argc, char** argv) {
  if (argc > 1 && std::string_view(argv[1]) == "ep") return true;
  for (int i = 1; i < argc; ++i)
    if (std::string_view(argv[i]) == "--ep") return true;
  return false;
}

int exec_ep_bench(int argc, char** argv) {
  std::error_code error;
  const std::filesystem::path self = std::filesystem::read_symlink("/proc/self/exe", error);
  const std::filesystem::path ep = (error ? std::filesystem::path(argv[0]) : self)
                                       .parent_path() / "moefuse-ep-bench";
  std::vector<std::string> args{ep.string()};
  for (int i = 1; i < argc; ++i) {
    const std::string_view a = argv[i];
    if (i == 1 && a == "ep") continue;
    args.emplace_back(a == "--ep" ? "--ranks" : a);
  }
  std::vector<char*> raw;
  for (std::string& a : args) raw.push_back(a.data());
  raw.push_back(nullptr);
  execv(raw[0], raw.data());
  std::fprintf(stderr,
               "moefuse-bench --ep: cannot run %s (%s); it is built when configure finds NCCL "
               "(MOEFUSE_WITH_NCCL, docs/ep.md)\n",
               raw[0], std::strerror(errno));
  return 2;
}

}  // namespace moefuse::bench
