#include "bench/torch_runner.h"

#include <sys/wait.h>

#include <cstdio>
#include <fstream>
#include <sstream>

namespace moefuse::bench {

std::optional<std::map<std::string, double>> run_torch_baseline(const std::string& script,
                                                                const std::string& arguments,
                                                                std::string* why) {
  if (!std::ifstream(script).good()) {
    *why = "script " + script + " not found (run from the repository root)";
    return std::nullopt;
  }
  const std::string command = "python3 " + script + " " + arguments + " 2>/dev/null";
  FILE* pipe = popen(command.c_str(), "r");
  if (!pipe) {
    *why = "could not start python3";
    return std::nullopt;
  }
  std::map<std::string, double> timings;
  char line[512];
  while (std::fgets(line, sizeof line, pipe)) {
    std::istringstream in(line);
    std::string tag, name;
    double ms = 0;
    if (in >> tag >> name >> ms && tag == "torch") timings[name] = ms;
  }
  const int status = pclose(pipe);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    *why = WIFEXITED(status) && WEXITSTATUS(status) == 3
               ? "python3 has no torch or no GPU"
               : "the script failed (exit " + std::to_string(WEXITSTATUS(status)) + ")";
    return std::nullopt;
  }
  return timings;
}

}  // namespace moefuse::bench
