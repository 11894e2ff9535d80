// What the GEMM benchmark modes (gemm, gemm-backward, gemm-fp8) share: options, the report's columns
// and metadata, the torch baseline call and the row format.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "bench/mode.h"
#include "bench/report.h"
#include "bench/routing.h"
#include "moefuse/grouped_gemm.h"

namespace moefuse::bench {

struct GemmBenchOptions {
  std::vector<std::string> presets;
  int64_t tokens = 0;
  RoutingDistribution routing = RoutingDistribution::kUniform;
  std::string routing_name;
  int warmup = 0, iters = 0;
  int warm_ms = 0;  // --warm-ms: every variant warms up for at least this long too (bench/timing.h)
  std::string json;
  bool torch = true;  // run the torch baseline (--no-torch: skip it, as the layer mode can)
};

// --preset (a name or "all"), --tokens, --routing, --warmup, --warm-ms, --iters, --json,
// --no-torch; then Args::finish.
GemmBenchOptions parse_gemm_bench_options(Args& args);
inline constexpr std::string_view kGemmBenchOptions =
    "[--preset NAME|all] [--tokens 16384] [--routing uniform|zipf|balanced] [--warmup 10] "
    "[--warm-ms 0] [--iters 50] [--json FILE] [--no-torch]";

// "128x256x64, 3 stages".
std::string tile_text(const GroupedGemmTile& tile);

// A report with the columns preset, op, variant, median_ms, TFLOP/s, vs_dense, vs_torch,
// vs_unfused and the run's metadata (the kernels' tile shapes among it: `tile`).
Report make_gemm_report(const std::string& title, const GemmBenchOptions& o,
                        const std::string& tile, const std::string& columns_note);

// The torch baseline's timings of one preset: `at(key)` is nullopt when torch did not run
// (`unavailable` says why) or printed no such key.
struct TorchGemmTimings {
  std::optional<std::map<std::string, double>> ms;
  std::string unavailable;
  std::optional<double> at(const std::string& key) const;
};

// Runs `script` on the exact per-expert counts with the --problem specs (unless --no-torch).
TorchGemmTimings run_torch_gemm(const std::string& script, const std::vector<int32_t>& counts,
                                const std::string& problems, const GemmBenchOptions& o);

// One row: TFLOP/s from `flops`, and the ratios dense/ms, torch/ms and unfused/ms ("-" when a
// reference is absent).
void add_gemm_row(Report& report, const std::string& preset, const std::string& op,
                  const std::string& variant, double ms, double flops, double dense_ms,
                  std::optional<double> torch_ms, std::optional<double> unfused_ms);

// Prints the report, the reproduce line, and writes --json when asked.
void finish_gemm_report(const Report& report, const GemmBenchOptions& o, const Args& args);

}  // namespace moefuse::bench
