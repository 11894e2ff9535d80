// `moefuse-bench layer` (the default mode): the whole MoE layer, forward and forward+backward, per
// preset or custom sizes, fused and unfused, as one CUDA graph (or eager). Measured in the same
// run: a per-stage breakdown (device events around each stage of an eager step), the torch
// unfused path (bench/torch_moe.py) and the dense cuBLAS bound of the same FLOPs.
//
// FLOPs (shared/ANCHORS.md): forward 2·T·k·H·(fc1 + F) = 6·T·k·H·F with GLU, backward twice that,
// plus the shared expert's dense MLP when the preset has one. Router GEMMs are not counted.
// Routing: the layer routes with its own router. --routing zipf gives every token a constant
// feature (x[:, 0] = 1) whose router weight is log(popularity) with popularity ∝ 1/rank^1.2 over
// a random expert order; the other features add noise of about a Gumbel's spread, so the top-1
// choice follows the popularity. The load it produced (max / mean expert count) is printed.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <memory>
#include <numeric>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "bench/cublas_baseline.h"
#include "bench/device_buffer.h"
#include "bench/cuda_graph.h"
#include "bench/layer_flops.h"
#include "bench/layer_tensors.h"
#include "bench/mode.h"
#include "bench/step_intervals.h"
#include "bench/report.h"
#include "bench/routing.h"
#include "bench/timing.h"
#include "bench/torch_runner.h"
#include "cuda/check.h"
#include "cuda/device.h"
#include "cuda/layer/plan.h"
#include "moefuse/config.h"
#include "moefuse/error.h"
#include "moefuse/layer.h"

namespace moefuse::bench {
namespace {

struct Options {
  std::vector<std::pair<std::string, MoeConfig>> configs;
  int64_t tokens = 16384;
  RoutingDistribution routing = RoutingDistribution::kUniform;
  std::string routing_name;
  std::vector<LayerMode> modes;
  bool graph = true, recompute = false, torch = true;
  // --precision fp8|mxfp8: also that layer (fused, fwd + bwd), next to bf16 (kBF16: none)
  PrecisionRecipe low = PrecisionRecipe::kBF16;
  // --fp8-wgrad fp8|bf16|both: the FP8 layer's wgrads (config.bf16_wgrad false, true, or a
  // variant of each)
  std::vector<bool> fp8_bf16_wgrad = {false};
  // --expert-grads: d_w1 and d_w2 in fp32 (the default) or bf16; fp32-accumulate: fp32, every
  // weight gradient added to (MoeLayerGrads::accumulate: main-grad accumulation).
  DType expert_grads = DType::kFloat32;
  bool accumulate = false;
  int warmup = 5, iters = 30;
  int warm_ms = 0;  // --warm-ms: warm up for at least this long too (bench/timing.h)
};

struct Totals {
  double forward_ms, step_ms;
};

struct Reports {
  Report stages{"layer stages (eager step, device events; second-stream stages overlap the main)",
                {"preset", "mode", "stage", "pass", "median_us", "share"}};
  Report totals{"layer totals",
                {"preset", "variant", "pass", "ms", "TFLOP/s", "Mtokens/s", "vs_torch",
                 "of_dense"}};
  Report memory{"layer memory plan (bytes per layer)",
                {"preset", "mode", "pre", "cache_MiB", "workspace_MiB", "x_MiB",
                 "sonicmoe_cache_MiB"}};
};

std::string load_summary(const LayerTensors& t, const LayerOptions& o, const Workspace& cache) {
  const layer::Plan p = layer::make_plan(t.c, o, t.T);
  std::vector<int32_t> counts(t.c.num_experts);
  MOEFUSE_CUDA_CHECK(cudaMemcpy(counts.data(),
                                static_cast<char*>(cache.data) + p.counts.offset,
                                4 * counts.size(), cudaMemcpyDeviceToHost));
  const double mean = static_cast<double>(t.T * t.c.top_k) / t.c.num_experts;
  const int32_t max = *std::max_element(counts.begin(), counts.end());
  const int32_t min = *std::min_element(counts.begin(), counts.end());
  char buf[128];
  std::snprintf(buf, sizeof buf, "max/mean %.2f, min/mean %.2f", max / mean, min / mean);
  return buf;
}

// The short name of a precision in the reports: "fp8", "mxfp8" ("" for bf16).
std::string precision_tag(PrecisionRecipe p) {
  if (p == PrecisionRecipe::kFP8Blockwise) return "fp8";
  return p == PrecisionRecipe::kMXFP8 ? "mxfp8" : "";
}

// The name of a (mode, precision) variant in the reports: "fused", "unfused", "fused fp8",
// "fused fp8 bf16-wgrad", "fused mxfp8".
std::string variant_name(const MoeConfig& c, LayerMode mode) {
  std::string n(layer_mode_name(mode));
  if (c.precision != PrecisionRecipe::kBF16) n += " " + precision_tag(c.precision);
  if (c.bf16_wgrad) n += " bf16-wgrad";
  return n;
}

// One mode of one preset (at `c`'s precision; t holds the bf16 tensors): stage breakdown, then
// forward and forward+backward totals. FP8: the weights are quantised once before timing (once
// per optimiser step in training); that pass is timed on its own and printed.
Totals bench_mode(const std::string& name, LayerTensors& t, const MoeConfig& c, LayerMode mode,
                  const Options& o, Reports& r, cudaStream_t stream, std::string* load) {
  const LayerOptions lo{.mode = mode, .recompute_pre = o.recompute};
  const std::string mode_name = variant_name(c, mode);
  const std::string tag = "layer " + name + " " + mode_name + ": ";
  progress(tag + "setup");
  MoeLayer layer(c, lo);
  const LayerMemoryPlan plan = layer_memory_plan(c, lo, t.T);
  DeviceBuffer cache_buf(plan.cache_bytes), ws_buf(plan.workspace_bytes),
      fp8_buf(plan.fp8_weight_bytes);
  const Workspace cache{.data = cache_buf.get(), .bytes = plan.cache_bytes};
  const Workspace ws{.data = ws_buf.get(), .bytes = plan.workspace_bytes};
  MoeLayerWeights w = t.weights();
  if (plan.fp8_weight_bytes > 0) {
    w.fp8 = {.data = fp8_buf.get(), .bytes = plan.fp8_weight_bytes};
    const double prep_ms =
        time_on_stream([&](cudaStream_t s) { layer.prepare_fp8_weights(w, s); }, stream,
                       o.warmup, o.iters).median_ms;
    std::printf("   %s %s: prepare_fp8_weights (%s, once per step) %.3f ms, %.1f MiB\n",
                name.c_str(), mode_name.c_str(),
                c.precision == PrecisionRecipe::kMXFP8 ? "w1, w2 → 4 qdq'd bf16 copies"
                                                        : "w1, w2 (+ shared) + transposes → e4m3",
                prep_ms, plan.fp8_weight_bytes / 1048576.0);
  }
  MoeLayerGrads g = t.grads(o.expert_grads);
  g.accumulate = o.accumulate;
  const MoeLayerOutputs out = t.outputs();
  auto forward = [&](cudaStream_t s, const LayerRun& run) {
    layer.forward(t.xv(), w, out, cache, ws, s, run);
  };
  auto step = [&](cudaStream_t s, const LayerRun& run) {
    forward(s, run);
    layer.backward(t.xv(), t.dyv(), w, g, cache, ws, s, run);
  };
  step(stream, {});
  MOEFUSE_CUDA_CHECK(cudaStreamSynchronize(stream));
  if (load) *load = load_summary(t, lo, cache);

  const bool recomputed = o.recompute;  // either precision caches pre unless asked
  r.memory.add_row({name, mode_name, std::string(recomputed ? "recomputed" : "cached"),
                    plan.cache_bytes / 1048576.0, plan.workspace_bytes / 1048576.0,
                    2.0 * t.T * t.c.hidden / 1048576.0,
                    (2.0 * t.T * t.c.hidden + 4.0 * t.T * t.c.top_k * t.c.ffn) / 1048576.0});

  progress(tag + "stage breakdown");
  {
    StepIntervals rec;
    const int n = std::min(o.iters, 20);
    for (int i = 0; i < n; ++i) {
      rec.start_step(stream);
      step(stream, {.observer = &rec});
    }
    MOEFUSE_CUDA_CHECK(cudaStreamSynchronize(stream));
    double fwd_sum = 0, bwd_sum = 0;
    const auto medians = rec.medians().stage_ms;
    for (const auto& [stage, ms] : medians)
      (layer_stage_is_backward(stage) ? bwd_sum : fwd_sum) += ms;
    for (const auto& [stage, ms] : medians) {
      const bool bwd = layer_stage_is_backward(stage);
      r.stages.add_row({name, mode_name, std::string(layer_stage_name(stage)),
                        std::string(bwd ? "bwd" : "fwd"), ms * 1e3,
                        ms / (bwd ? bwd_sum : fwd_sum)});
    }
  }

  progress(tag + (o.graph ? "graph" : "eager") + " forward");
  Totals tot{};
  if (o.graph) {
    const Graph fg([&](cudaStream_t s) { forward(s, {}); }, stream);
    tot.forward_ms = time_on_stream([&](cudaStream_t s) { fg.launch(s); }, stream, o.warmup,
                                    o.iters, o.warm_ms).median_ms;
    progress(tag + "graph forward+backward");
    const Graph sg([&](cudaStream_t s) { step(s, {}); }, stream);
    tot.step_ms = time_on_stream([&](cudaStream_t s) { sg.launch(s); }, stream, o.warmup,
                                 o.iters, o.warm_ms).median_ms;
  } else {
    tot.forward_ms = time_on_stream([&](cudaStream_t s) { forward(s, {}); }, stream, o.warmup,
                                    o.iters, o.warm_ms).median_ms;
    progress(tag + "eager forward+backward");
    tot.step_ms = time_on_stream([&](cudaStream_t s) { step(s, {}); }, stream, o.warmup,
                                 o.iters, o.warm_ms).median_ms;
  }
  return tot;
}

// The dense bound: the same GEMM FLOPs as plain cuBLAS GEMMs over all T·k rows at once.
Totals dense_bound(const MoeConfig& c, int64_t T, const Options& o, cudaStream_t stream) {
  const int64_t R = T * c.top_k, H = c.hidden, F = c.ffn, fc1 = c.fc1_width();
  const MoeConfig s = shared_expert_config(c);
  const bool shared = c.shared_expert_ffn > 0;
  struct Gemm {
    int64_t m, n, k;
    bool backward;
  };
  std::vector<Gemm> gemms = {{R, fc1, H, false}, {R, H, F, false},   // FC1, FC2
                             {R, F, H, true},    {H, F, R, true},     // FC2 dgrad, wgrad
                             {R, H, fc1, true},  {fc1, H, R, true}};  // FC1 dgrad, wgrad
  if (shared) {
    const int64_t sfc1 = s.fc1_width(), sF = s.ffn;
    gemms.insert(gemms.end(), {{T, sfc1, H, false}, {T, H, sF, false}, {T, sF, H, true},
                               {H, sF, T, true}, {T, H, sfc1, true}, {sfc1, H, T, true}});
  }
  size_t a = 0, b = 0, d = 0;
  for (const Gemm& gm : gemms) {
    a = std::max<size_t>(a, gm.m * gm.k), b = std::max<size_t>(b, gm.n * gm.k);
    d = std::max<size_t>(d, gm.m * gm.n);
  }
  DeviceBuffer A(2 * a), B(2 * b), D(2 * d);
  fill_uniform_bf16(A.get(), a, -1, 1, 11, stream);
  fill_uniform_bf16(B.get(), b, -0.05f, 0.05f, 12, stream);
  CublasBaseline cublas;
  auto chain = [&](bool with_backward) {
    return [&, with_backward](cudaStream_t st) {
      for (const Gemm& gm : gemms)
        if (with_backward || !gm.backward) cublas.gemm_bf16(A.get(), B.get(), D.get(), gm.m, gm.n, gm.k, st);
    };
  };
  return {.forward_ms = time_on_stream(chain(false), stream, o.warmup, o.iters, o.warm_ms)
                            .median_ms,
          .step_ms = time_on_stream(chain(true), stream, o.warmup, o.iters, o.warm_ms).median_ms};
}

std::optional<Totals> torch_times(const MoeConfig& c, int64_t T, const Options& o,
                                  std::string* why) {
  char args[512];
  std::snprintf(args, sizeof args,
                "--tokens %lld --hidden %lld --ffn %lld --experts %lld --topk %lld "
                "--shared-ffn %lld --activation %s --routing %s --warmup %d --iters %d "
                "--warm-ms %d",
                static_cast<long long>(T), static_cast<long long>(c.hidden),
                static_cast<long long>(c.ffn), static_cast<long long>(c.num_experts),
                static_cast<long long>(c.top_k), static_cast<long long>(c.shared_expert_ffn),
                is_glu(c.activation) ? "glu" : "plain", o.routing_name.c_str(), o.warmup,
                o.iters, o.warm_ms);
  const auto t = run_torch_baseline("bench/torch_moe.py", args, why);
  if (!t || !t->count("fwd") || !t->count("fwdbwd")) {
    if (t) *why = "the script printed no fwd/fwdbwd line";
    return std::nullopt;
  }
  return Totals{.forward_ms = t->at("fwd"), .step_ms = t->at("fwdbwd")};
}

void bench_config(const std::string& name, const MoeConfig& c, const Options& o, Reports& r,
                  cudaStream_t stream) {
  const int64_t T = o.tokens;
  const Flops flops = model_flops(c, T);
  const uint64_t seed = 0x1a7e0000 + std::hash<std::string>{}(name);
  progress("layer " + name + ": random weights");
  LayerTensors t(c, T, o.routing, seed);
  std::map<LayerMode, Totals> ours;
  std::map<bool, Totals> low;  // the low-precision layer by config.bf16_wgrad
  std::string load, low_skipped;
  for (LayerMode m : o.modes)
    ours[m] = bench_mode(name, t, c, m, o, r, stream, load.empty() ? &load : nullptr);
  if (o.low != PrecisionRecipe::kBF16) {
    MoeConfig cl = c;
    cl.precision = o.low;
    try {
      layer_memory_plan(cl, {}, 1);  // validates: H, F % 16 (FP8) or % 32 (MXFP8)
      for (bool bf16_wgrad : o.fp8_bf16_wgrad) {
        cl.bf16_wgrad = bf16_wgrad;
        low[bf16_wgrad] = bench_mode(name, t, cl, LayerMode::kFused, o, r, stream, nullptr);
      }
    } catch (const InvalidArgument& e) {
      low_skipped = e.what();
    }
  }
  progress("layer " + name + ": dense cuBLAS bound");
  const Totals dense = dense_bound(c, T, o, stream);
  std::optional<Totals> torch;
  std::string why = "skipped (--no-torch)";
  if (o.torch) {
    progress("layer " + name + ": torch");
    torch = torch_times(c, T, o, &why);
  }
  progress_done();

  auto add = [&](const std::string& variant, const Totals& tt) {
    for (bool step : {false, true}) {
      const double ms = step ? tt.step_ms : tt.forward_ms;
      const double fl = step ? flops.forward + flops.backward : flops.forward;
      const Cell vs_torch = torch ? Cell{(step ? torch->step_ms : torch->forward_ms) / ms}
                                  : Cell{std::string("-")};
      r.totals.add_row({name, variant, std::string(step ? "fwd+bwd" : "fwd"), ms,
                        fl / ms * 1e-9, T / ms * 1e-3, vs_torch,
                        (step ? dense.step_ms : dense.forward_ms) / ms});
    }
  };
  const std::string how = o.graph ? " (graph)" : " (eager)";
  for (const auto& [m, tt] : ours) add("moefuse " + std::string(layer_mode_name(m)) + how, tt);
  const std::string tag = precision_tag(o.low);
  for (const auto& [bf16_wgrad, tt] : low)
    add("moefuse fused " + tag + " (fwd + bwd" + (bf16_wgrad ? ", bf16 wgrads)" : ")") + how, tt);
  if (torch) add("torch unfused", *torch);
  add("dense cuBLAS bound", dense);
  std::printf("   %s: routing %s (%s); torch: %s\n", name.c_str(), o.routing_name.c_str(),
              load.c_str(), torch ? "measured" : why.c_str());
  if (ours.count(LayerMode::kFused) && ours.count(LayerMode::kUnfused))
    std::printf("   %s: fused / unfused speedup: fwd %.2fx, fwd+bwd %.2fx\n", name.c_str(),
                ours[LayerMode::kUnfused].forward_ms / ours[LayerMode::kFused].forward_ms,
                ours[LayerMode::kUnfused].step_ms / ours[LayerMode::kFused].step_ms);
  for (const auto& [bf16_wgrad, tt] : low)
    if (ours.count(LayerMode::kFused))
      std::printf("   %s: %s / bf16 (fused) speedup: fwd %.2fx, fwd+bwd %.2fx (%s)\n",
                  name.c_str(), tag.c_str(), ours[LayerMode::kFused].forward_ms / tt.forward_ms,
                  ours[LayerMode::kFused].step_ms / tt.step_ms,
                  bf16_wgrad ? "bf16 wgrads" : ("all " + tag).c_str());
  if (o.low != PrecisionRecipe::kBF16 && low.empty())
    std::printf("   %s: %s skipped: %s\n", name.c_str(), tag.c_str(), low_skipped.c_str());
}

// --preset NAME|all, or custom sizes on top of a preset (--hidden, --ffn, --experts, --topk).
// The configs stay bf16; --precision fp8|mxfp8 sets *low (that variant runs next to them).
std::vector<std::pair<std::string, MoeConfig>> parse_configs(Args& args, PrecisionRecipe* low) {
  const std::string which = args.get("preset", "qwen3-30b-a3b");
  const int64_t hidden = args.get_int("hidden", 0, 0, 1 << 16);
  const int64_t ffn = args.get_int("ffn", 0, 0, 1 << 17);
  const int64_t experts = args.get_int("experts", 0, 0, 1024);
  const int64_t topk = args.get_int("topk", 0, 0, 64);
  const std::string precision = args.get("precision", "bf16");
  std::vector<std::pair<std::string, MoeConfig>> out;
  if (which == "all") {
    for (auto n : preset_names()) out.push_back({std::string(n), preset(n)});
  } else {
    out.push_back({which, preset(which)});
  }
  for (auto& [name, c] : out) {
    if (hidden || ffn || experts || topk) name += " (custom)";
    if (hidden) c.hidden = hidden;
    if (ffn) c.ffn = ffn;
    if (experts) c.num_experts = experts;
    if (topk) c.top_k = topk;
    MOEFUSE_EXPECT(precision == "bf16" || precision == "fp8" || precision == "mxfp8",
                   "--precision",
                   "bf16, fp8 or mxfp8 (that layer, forward and backward, next to bf16)",
                   precision);
    layer_memory_plan(c, {}, 1);  // validates the config
  }
  *low = precision == "fp8"     ? PrecisionRecipe::kFP8Blockwise
         : precision == "mxfp8" ? PrecisionRecipe::kMXFP8
                                : PrecisionRecipe::kBF16;
  return out;
}

int run(Args& args) {
  Options o;
  o.configs = parse_configs(args, &o.low);
  o.tokens = args.get_int("tokens", 16384, 1, int64_t{1} << 22);
  o.routing_name = args.get("routing", "uniform");
  o.routing = parse_routing(o.routing_name);
  // The layer routes with its own router (--routing zipf skews its weights); "balanced" is an
  // assignment no router weights give.
  MOEFUSE_EXPECT(o.routing != RoutingDistribution::kBalanced, "--routing",
                 "uniform or zipf (balanced: gemm, gemm-backward, dispatch and quant only)",
                 o.routing_name);
  const std::string mode = args.get("mode", "both");
  MOEFUSE_EXPECT(mode == "both" || mode == "fused" || mode == "unfused", "--mode",
                 "fused, unfused or both", mode);
  if (mode != "unfused") o.modes.push_back(LayerMode::kFused);
  if (mode != "fused") o.modes.push_back(LayerMode::kUnfused);
  o.graph = !args.flag("eager");
  o.recompute = args.flag("recompute");
  o.torch = !args.flag("no-torch");
  const std::string expert_grads = args.get("expert-grads", "fp32");
  MOEFUSE_EXPECT(expert_grads == "fp32" || expert_grads == "bf16" ||
                     expert_grads == "fp32-accumulate",
                 "--expert-grads", "fp32, bf16 or fp32-accumulate (d_w1 and d_w2)",
                 expert_grads);
  o.expert_grads = expert_grads == "bf16" ? DType::kBFloat16 : DType::kFloat32;
  o.accumulate = expert_grads == "fp32-accumulate";
  const std::string fp8_wgrad = args.get("fp8-wgrad", "fp8");
  MOEFUSE_EXPECT(fp8_wgrad == "fp8" || fp8_wgrad == "bf16" || fp8_wgrad == "both",
                 "--fp8-wgrad", "fp8, bf16 or both (the low-precision layer's wgrads)",
                 fp8_wgrad);
  if (fp8_wgrad == "bf16") o.fp8_bf16_wgrad = {true};
  if (fp8_wgrad == "both") o.fp8_bf16_wgrad = {false, true};
  o.warmup = static_cast<int>(args.get_int("warmup", 5, 0, 10000));
  o.iters = static_cast<int>(args.get_int("iters", 30, 1, 100000));
  o.warm_ms = static_cast<int>(args.get_int("warm-ms", 0, 0, 60000));
  const std::string json = args.get("json", "");
  args.finish();
  if (gpu_missing("layer")) return 0;
  Reports r;
  for (Report* rep : {&r.stages, &r.totals, &r.memory}) {
    rep->set_meta("tokens", static_cast<long long>(o.tokens));
    rep->set_meta("routing", o.routing_name);
  }
  r.totals.set_meta("timing", std::string(o.graph ? "one CUDA graph per pass" : "eager") + ", " +
                                  timing_note(o.warmup, o.iters, o.warm_ms));
  r.totals.set_meta("expert_grads", expert_grads);
  r.totals.set_meta("flops", "fwd 2·T·k·H·(fc1+F) (= 6·T·k·H·F with GLU), bwd 2× fwd, + shared "
                             "expert; of_dense = dense cuBLAS time / this time");
  r.memory.set_meta("columns", "cache: kept per layer from forward to backward (x excluded: the "
                               "caller's); workspace: peak scratch of one call; sonicmoe_cache: "
                               "2·T·H + 4·T·k·F bytes, the published figure");
  cudaStream_t stream = nullptr;
  MOEFUSE_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  for (const auto& [name, c] : o.configs) bench_config(name, c, o, r, stream);
  cudaStreamDestroy(stream);
  r.stages.print();
  r.memory.print();
  r.totals.print();
  std::printf("reproduce: %s\n", args.command().c_str());
  if (!json.empty()) write_json_file(json, args.command(), {&r.stages, &r.memory, &r.totals});
  return 0;
}

}  // namespace

MOEFUSE_BENCH_MODE(layer, "layer",
                   "the whole MoE layer fwd / fwd+bwd (graph), per stage, vs torch and dense "
                   "cuBLAS",
                   "[--preset NAME|all] [--hidden H --ffn F --experts E --topk k] "
                   "[--tokens 16384] [--routing uniform|zipf] [--precision bf16|fp8|mxfp8] "
                   "[--fp8-wgrad fp8|bf16|both] [--mode both|fused|unfused] [--eager] "
                   "[--recompute] [--expert-grads fp32|bf16|fp32-accumulate] [--no-torch] "
                   "[--warmup 5] [--warm-ms 0] [--iters 30] [--json FILE]",
                   run);

}  // namespace moefuse::bench
