#include "bench/gemm_bench.h"

#include <cstdio>

#include "bench/timing.h"
#include "bench/torch_runner.h"
#include "moefuse/config.h"

namespace moefuse::bench {

GemmBenchOptions parse_gemm_bench_options(Args& args) {
  GemmBenchOptions o;
  const std::string presets = args.get("preset", "all");
  o.tokens = args.get_int("tokens", 16384, 1, int64_t{1} << 20);
  o.routing_name = args.get("routing", "uniform");
  o.routing = parse_routing(o.routing_name);
  o.warmup = static_cast<int>(args.get_int("warmup", 10, 0, 10000));
  o.warm_ms = static_cast<int>(args.get_int("warm-ms", 0, 0, 60000));
  o.iters = static_cast<int>(args.get_int("iters", 50, 1, 100000));
  o.json = args.get("json", "");
  o.torch = !args.flag("no-torch");
  args.finish();
  if (presets == "all") {
    for (auto n : preset_names()) o.presets.emplace_back(n);
  } else {
    preset(presets);  // validates the name
    o.presets.push_back(presets);
  }
  return o;
}

std::string tile_text(const GroupedGemmTile& tile) {
  return std::to_string(tile.block_m) + "x" + std::to_string(tile.block_n) + "x" +
         std::to_string(tile.block_k) + ", " + std::to_string(tile.stages) + " stages";
}

Report make_gemm_report(const std::string& title, const GemmBenchOptions& o,
                        const std::string& tile, const std::string& columns_note) {
  Report report(title, {"preset", "op", "variant", "median_ms", "TFLOP/s", "vs_dense", "vs_torch",
                        "vs_unfused"});
  report.set_meta("tokens", static_cast<long long>(o.tokens));
  report.set_meta("routing", o.routing_name);
  report.set_meta("timing", timing_note(o.warmup, o.iters, o.warm_ms));
  report.set_meta("tile", tile);
  report.set_meta("columns", columns_note);
  return report;
}

std::optional<double> TorchGemmTimings::at(const std::string& key) const {
  if (!ms || !ms->count(key)) return std::nullopt;
  return ms->at(key);
}

TorchGemmTimings run_torch_gemm(const std::string& script, const std::vector<int32_t>& counts,
                                const std::string& problems, const GemmBenchOptions& o) {
  std::string list;
  for (size_t i = 0; i < counts.size(); ++i) list += (i ? "," : "") + std::to_string(counts[i]);
  TorchGemmTimings t;
  if (!o.torch) {
    t.unavailable = "skipped (--no-torch)";
    return t;
  }
  t.ms = run_torch_baseline(script,
                            "--counts " + list + problems + " --warmup " +
                                std::to_string(o.warmup) + " --warm-ms " +
                                std::to_string(o.warm_ms) + " --iters " + std::to_string(o.iters),
                            &t.unavailable);
  return t;
}

void add_gemm_row(Report& report, const std::string& preset, const std::string& op,
                  const std::string& variant, double ms, double flops, double dense_ms,
                  std::optional<double> torch_ms, std::optional<double> unfused_ms) {
  auto ratio = [&](std::optional<double> ref) -> Cell {
    return ref ? Cell{*ref / ms} : Cell{std::string("-")};
  };
  report.add_row({preset, op, variant, ms, flops / ms * 1e-9, dense_ms / ms, ratio(torch_ms),
                  ratio(unfused_ms)});
}

void finish_gemm_report(const Report& report, const GemmBenchOptions& o, const Args& args) {
  report.print();
  std::printf("reproduce: %s\n", args.command().c_str());
  if (!o.json.empty()) write_json_file(o.json, args.command(), {&report});
}

}  // namespace moefuse::bench
