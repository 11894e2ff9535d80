// Runs a torch baseline script (bench/torch_*.py) in the same benchmark run and reads its timings.
#pragma once

#include <map>
#include <optional>
#include <string>

namespace moefuse::bench {

// Runs `python3 <script> <arguments>` and returns the lines it printed of the form
// `torch <name> <median_ms>` as {name: ms}. nullopt when python3, torch or a GPU is unavailable
// (the script exits 3) or the script is missing; the reason goes to `why`.
std::optional<std::map<std::string, double>> run_torch_baseline(const std::string& script,
                                                                const std::string& arguments,
                                                                std::string* why);

}  // namespace moefuse::bench
