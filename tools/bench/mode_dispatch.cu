// moefuse-bench dispatch: the router and dispatch kernels per preset, as achieved bytes per
// second against a device-to-device copy of the same traffic measured in the same run, and
// against the same step in eager torch (bench/torch_dispatch.py, run once per preset).
//
// Bytes are the minimum traffic of each kernel (every input read once, every output written
// once); the copy baseline is cudaMemcpyAsync of bytes/2 (a copy reads and writes each byte).
// Router kernels read random logits; with --routing zipf the dispatch kernels get skewed routes.
// permute_quantize_fp8 (permute fused with the 1x128 FP8 quantisation) counts x read once, k E4M3
// rows and the K-major scales written, and has the permute's copy target.
// Targets (docs/dispatch.md): permute and combine reach 0.85 of the copy's TB/s, router_topk is
// 5x faster than torch's router sequence; the `met` column says whether this run met them.
// The router's logits backward (cuBLAS) is timed whole and GEMM by GEMM, with TFLOP/s (-1 on the
// rows that do no matrix products).
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "bench/device_buffer.h"
#include "bench/mode.h"
#include "bench/report.h"
#include "bench/routing.h"
#include "bench/timing.h"
#include "bench/torch_runner.h"
#include "cuda/check.h"
#include "cuda/dispatch/permute_tuning.h"
#include "cuda/device.h"
#include "cuda/router/router_gemm.h"
#include "cuda/sm_count.h"
#include "moefuse/config.h"
#include "moefuse/dispatch.h"
#include "moefuse/error.h"
#include "moefuse/grouped_gemm_fp8.h"
#include "moefuse/router.h"

namespace moefuse::bench {
namespace {

constexpr int kWarmup = 5, kIters = 50;
constexpr double kCopyTarget = 0.85;  // fraction of the copy's TB/s
constexpr double kTorchTarget = 5.0;  // speed-up over the torch sequence

enum class Target { kNone, kCopy, kTorch };

struct Kernel {
  std::string name;
  std::string torch_name;  // the `torch <name>` line it compares with ("" for none)
  double bytes;
  Target target;
  std::function<void(cudaStream_t)> launch;
  double flops = 0;  // matrix-product flops, for the TFLOP/s column (0: not a GEMM)
};

using TorchTimes = std::optional<std::map<std::string, double>>;

// The torch step's times, or none (with the reason printed) when it cannot run or is not wanted.
TorchTimes torch_times(const MoeConfig& c, int64_t T, bool wanted) {
  if (!wanted) {
    std::printf("torch: skipped (--no-torch)\n");
    return std::nullopt;
  }
  const bool sigmoid = c.router.kind == RouterKind::kSigmoidGroupTopK;
  char args[320];
  std::snprintf(args, sizeof args,
                "--tokens %lld --hidden %lld --experts %lld --topk %lld --router %s --groups %d "
                "--topk-groups %d --scale %g",
                static_cast<long long>(T), static_cast<long long>(c.hidden),
                static_cast<long long>(c.num_experts), static_cast<long long>(c.top_k),
                sigmoid ? "sigmoid" : "softmax", sigmoid ? c.router.num_groups : 1,
                sigmoid ? c.router.topk_groups : 1,
                static_cast<double>(c.router.routed_scaling_factor));
  std::string why;
  TorchTimes times = run_torch_baseline("bench/torch_dispatch.py", args, &why);
  if (!times) std::printf("torch: unavailable (%s)\n", why.c_str());
  return times;
}

// Times every kernel and a copy of its bytes, and adds one report row per kernel.
void time_kernels(std::string_view preset_name, const std::vector<Kernel>& kernels,
                  const TorchTimes& torch, Report& report, cudaStream_t stream) {
  double max_bytes = 0;
  for (const auto& kr : kernels) max_bytes = std::max(max_bytes, kr.bytes);
  const DeviceBuffer copy_src(static_cast<size_t>(max_bytes / 2) + 16),
      copy_dst(static_cast<size_t>(max_bytes / 2) + 16);
  fill_uniform_bf16(copy_src.get(), copy_src.bytes() / 2, -1, 1, 7, stream);
  for (size_t i = 0; i < kernels.size(); ++i) {
    const Kernel& kr = kernels[i];
    progress("[" + std::string(preset_name) + " " + std::to_string(i + 1) + "/" +
             std::to_string(kernels.size()) + "] " + kr.name);
    const Timing t = time_on_stream(kr.launch, stream, kWarmup, kIters);
    const size_t copy_bytes = static_cast<size_t>(kr.bytes / 2);
    const Timing copy = time_on_stream(
        [&](cudaStream_t s) {
          MOEFUSE_CUDA_CHECK(cudaMemcpyAsync(copy_dst.get(), copy_src.get(), copy_bytes,
                                             cudaMemcpyDeviceToDevice, s));
        },
        stream, kWarmup, kIters);
    const double tbs = kr.bytes / (t.median_ms * 1e-3) / 1e12;
    const double copy_tbs = kr.bytes / (copy.median_ms * 1e-3) / 1e12;
    double torch_us = -1, speedup = -1;
    if (torch && !kr.torch_name.empty() && torch->count(kr.torch_name)) {
      torch_us = torch->at(kr.torch_name) * 1e3;
      speedup = torch_us / (t.median_ms * 1e3);
    }
    char target[32] = "-";
    std::string met = "-";
    if (kr.target == Target::kCopy) {
      std::snprintf(target, sizeof target, "vs_copy>=%.2f", kCopyTarget);
      met = tbs / copy_tbs >= kCopyTarget ? "yes" : "NO";
    } else if (kr.target == Target::kTorch) {
      std::snprintf(target, sizeof target, "speedup>=%.0f", kTorchTarget);
      met = speedup < 0 ? "n/a" : speedup >= kTorchTarget ? "yes" : "NO";
    }
    const double tflops = kr.flops > 0 ? kr.flops / (t.median_ms * 1e-3) / 1e12 : -1;
    report.add_row({std::string(preset_name), kr.name, t.median_ms * 1e3, kr.bytes / 1e6, tbs,
                    copy_tbs, tbs / copy_tbs, tflops, torch_us, speedup, std::string(target),
                    met});
  }
  progress_done();
}

// hidden > 0 replaces the preset's H (rows named "<preset> H=<hidden>"): the same kernels on rows
// of another width, e.g. to tell a row-alignment effect from a size one.
void run_preset(std::string_view preset_name, int64_t hidden, int64_t T, RoutingDistribution dist,
                uint64_t seed, bool torch_wanted, cublasHandle_t cublas, Report& report,
                cudaStream_t stream) {
  MoeConfig c = preset(preset_name);
  std::string name(preset_name);
  if (hidden > 0) {
    c.hidden = hidden;
    name += " H=" + std::to_string(hidden);
  }
  const int64_t H = c.hidden, E = c.num_experts, k = c.top_k, R = T * k;
  const SyntheticRouting routing = draw_routing(T, E, k, dist, seed);

  DeviceBuffer logits(4 * T * E), bias(4 * E), probs(4 * T * k), f(4 * E), P(4 * E), losses(8),
      idx(4 * T * k), counts(4 * E), d_logits(4 * T * E), d_probs(4 * T * k), d_probs_out(4 * T * k);
  fill_uniform_fp32(logits.get(), T * E, -4, 4, seed + 1, stream);
  fill_uniform_fp32(bias.get(), E, -0.1f, 0.1f, seed + 2, stream);
  fill_uniform_fp32(d_probs.get(), T * k, -1, 1, seed + 3, stream);
  DeviceBuffer routes = upload(routing.expert_idx), offsets(4 * (E + 1)), row_of(4 * T * k),
               token_of_row(4 * R);
  DeviceBuffer x(2 * T * H), xs(2 * R * H), ys(2 * R * H), y(2 * T * H), dy(2 * T * H),
      dys(2 * R * H), dx(2 * T * H);
  // permute_quantize_fp8's outputs: E4M3 rows and K-major 1x128 scales (moefuse/grouped_gemm_fp8.h).
  const int64_t scale_groups = fp8_scale_groups(H), scale_pitch = fp8_scale_rows(R);
  DeviceBuffer xs_fp8(R * H), xs_scales(4 * scale_groups * scale_pitch);
  fill_uniform_bf16(x.get(), T * H, -1, 1, seed + 4, stream);
  fill_uniform_bf16(ys.get(), R * H, -1, 1, seed + 5, stream);
  fill_uniform_bf16(dy.get(), T * H, -1, 1, seed + 6, stream);
  DeviceBuffer ws_router(router_topk_workspace_size(T, E)),
      ws_maps(dispatch_maps_workspace_size(T, E));
  // The router's logits backward: the API call, and its two GEMMs alone on a bf16 d_logits.
  DeviceBuffer w_router(2 * E * H), d_w_router(4 * E * H), d_logits16(2 * T * E),
      ws_logits_bwd(router_logits_backward_workspace_size(T, E));
  fill_uniform_bf16(w_router.get(), E * H, -0.05f, 0.05f, seed + 7, stream);
  fill_uniform_fp32(d_logits.get(), T * E, -1, 1, seed + 8, stream);
  fill_uniform_bf16(d_logits16.get(), T * E, -1, 1, seed + 9, stream);
  const cuda::RouterGemmBackward gemms{
      .cublas = cublas,
      .gemm_workspace = ws_logits_bwd.get(),
      .x = static_cast<const __nv_bfloat16*>(x.get()),
      .w_router = static_cast<const __nv_bfloat16*>(w_router.get()),
      .d_logits16 = static_cast<const __nv_bfloat16*>(d_logits16.get()),
      .dx = static_cast<__nv_bfloat16*>(dx.get()),
      .d_w_router = static_cast<float*>(d_w_router.get()),
      .tokens = static_cast<int>(T),
      .hidden = static_cast<int>(H),
      .experts = static_cast<int>(E),
  };
  const TensorView none{};

  const auto v_logits = logits.view(DType::kFloat32, {T, E});
  const auto v_idx = idx.view(DType::kInt32, {T, k});
  const auto v_counts = counts.view(DType::kInt32, {E});
  const auto v_probs = probs.view(DType::kFloat32, {T, k});
  const auto v_row_of = row_of.view(DType::kInt32, {T, k});
  const auto v_tor = token_of_row.view(DType::kInt32, {R});
  const RouterOutputs outs{.expert_idx = v_idx, .probs = v_probs, .counts = v_counts,
                           .aux_f = f.view(DType::kFloat32, {E}),
                           .aux_P = P.view(DType::kFloat32, {E}),
                           .losses = losses.view(DType::kFloat32, {2})};
  const auto route = [&](cudaStream_t s) {
    router_topk(c.router, k, v_logits,
                c.router.use_score_bias ? bias.view(DType::kFloat32, {E}) : none, outs, none,
                Workspace{.data = ws_router.get(), .bytes = ws_router.bytes()}, s);
  };
  const auto maps = [&](cudaStream_t s) {
    dispatch_maps(routes.view(DType::kInt32, {T, k}), E, 1,
                  DispatchMaps{.offsets = offsets.view(DType::kInt32, {E + 1}),
                               .row_of = v_row_of, .token_of_row = v_tor},
                  none, Workspace{.data = ws_maps.get(), .bytes = ws_maps.bytes()}, s);
  };
  const auto permute_rows = [&](cudaStream_t s) {
    permute(x.view(DType::kBFloat16, {T, H}), v_row_of, v_tor, xs.view(DType::kBFloat16, {R, H}),
            none, s);
  };
  route(stream);  // idx and counts for the router backward; maps for the row kernels
  maps(stream);

  const double act = 2.0 * T * H;  // one bf16 [T, H]
  const double gemm_flops = 2.0 * T * E * H;  // each of the logits backward's two GEMMs
  const double maps_bytes = 4.0 * T * k * 2 + 4.0 * R, permute_bytes = act * (1 + k) + 4.0 * T * k;
  // Read x once, write k code rows (1 byte an element) and their scales; row_of and token_of_row.
  const double quant_bytes =
      act + 1.0 * T * H * k + 4.0 * scale_groups * scale_pitch + 4.0 * T * k + 4.0 * R;
  std::vector<Kernel> kernels = {
      {"router_topk", "router", 4.0 * T * E + 8.0 * T * k, Target::kTorch, route},
      {"router_backward", "router_backward", 8.0 * T * E + 8.0 * T * k, Target::kNone,
       [&](cudaStream_t s) {
         router_topk_backward(c.router, k, v_logits, v_idx, v_counts,
                              d_probs.view(DType::kFloat32, {T, k}), TensorView{},
                              d_logits.view(DType::kFloat32, {T, E}), s);
       }},
      {"router_logits_backward", "router_logits_backward",
       act * 3 + 10.0 * T * E + 6.0 * E * H, Target::kNone,
       [&](cudaStream_t s) {
         router_logits_backward(cublas, x.view(DType::kBFloat16, {T, H}),
                                w_router.view(DType::kBFloat16, {E, H}),
                                d_logits.view(DType::kFloat32, {T, E}),
                                dx.view(DType::kBFloat16, {T, H}),
                                d_w_router.view(DType::kFloat32, {E, H}),
                                Workspace{.data = ws_logits_bwd.get(), .bytes = ws_logits_bwd.bytes()},
                                s);
       },
       gemm_flops * 2},
      {"router_dx_gemm", "", act * 2 + 2.0 * T * E + 2.0 * E * H, Target::kNone,
       [&](cudaStream_t s) { cuda::router_dx_gemm(gemms, s); }, gemm_flops},
      {"dispatch_maps", "", maps_bytes, Target::kNone, maps},
      {"permute", "permute", permute_bytes, Target::kCopy, permute_rows},
      {"permute_quantize_fp8", "", quant_bytes, Target::kCopy,
       [&](cudaStream_t s) {
         permute_quantize_fp8(x.view(DType::kBFloat16, {T, H}), v_row_of, v_tor,
                              xs_fp8.view(DType::kFloat8E4M3, {R, H}),
                              xs_scales.view(DType::kFloat32, {scale_groups, scale_pitch}), none,
                              s);
       }},
      {"maps+permute", "dispatch", maps_bytes + permute_bytes, Target::kNone,
       [&](cudaStream_t s) {
         maps(s);
         permute_rows(s);
       }},
      {"permute_backward", "permute_backward", act * (1 + k) + 4.0 * T * k, Target::kNone,
       [&](cudaStream_t s) {
         permute_backward(xs.view(DType::kBFloat16, {R, H}), v_row_of,
                          dx.view(DType::kBFloat16, {T, H}), none, s);
       }},
      // The layer's dx: the permute's backward with the router's d_logits·Wr in the same pass,
      // against the two calls it replaced (the dx GEMM reading dx back and writing it again).
      {"permute_backward_router", "", act * (1 + k) + 4.0 * T * k + 4.0 * T * E + 2.0 * E * H,
       Target::kNone,
       [&](cudaStream_t s) {
         permute_backward_router(xs.view(DType::kBFloat16, {R, H}), v_row_of, none,
                                 d_logits.view(DType::kFloat32, {T, E}),
                                 w_router.view(DType::kBFloat16, {E, H}),
                                 dx.view(DType::kBFloat16, {T, H}), none, s);
       },
       gemm_flops},
      {"permute_backward+router_dx_gemm", "",
       act * (3 + k) + 4.0 * T * k + 2.0 * T * E + 2.0 * E * H, Target::kNone,
       [&](cudaStream_t s) {
         permute_backward(xs.view(DType::kBFloat16, {R, H}), v_row_of,
                          dx.view(DType::kBFloat16, {T, H}), none, s);
         cuda::router_dx_gemm(gemms, s);
       },
       gemm_flops},
      {"combine", "combine", act * (1 + k) + 8.0 * T * k, Target::kCopy,
       [&](cudaStream_t s) {
         combine(ys.view(DType::kBFloat16, {R, H}), v_probs, v_row_of,
                 y.view(DType::kBFloat16, {T, H}), none, s);
       }},
      {"combine_backward", "combine_backward", act * (1 + 2 * k) + 12.0 * T * k, Target::kNone,
       [&](cudaStream_t s) {
         combine_backward(dy.view(DType::kBFloat16, {T, H}), ys.view(DType::kBFloat16, {R, H}),
                          v_probs, v_row_of, v_tor, dys.view(DType::kBFloat16, {R, H}),
                          d_probs_out.view(DType::kFloat32, {T, k}), none, s);
       }},
  };
  // dWr in the library's split along T (one wave of output tiles) and in one part more.
  const cuda::DwSplit dw_plan = cuda::plan_dw_split(T, H, E, cuda::device_sm_count(),
                                                    cuda::router_dw_partial_bytes());
  for (const cuda::DwSplit& split : {dw_plan, cuda::dw_split_into(T, dw_plan.parts + 1)}) {
    if (split.parts * E * H * 4 > static_cast<int64_t>(cuda::router_dw_partial_bytes())) continue;
    kernels.push_back({"router_dw_gemm " + std::to_string(split.parts) + " parts", "",
                       act + 2.0 * T * E + 4.0 * E * H, Target::kNone,
                       [&gemms, split](cudaStream_t s) { cuda::router_dw_gemm(gemms, split, s); },
                       gemm_flops});
  }
  // Other launch shapes of the two permutes next to the library's (8 KiB stages, of at least
  // two rows for the copy, as many one-warp CTAs as fit): which one, if any, reaches the copy
  // target (cuda/dispatch/permute_tuning.h). Named by what runs, rows a stage and CTAs an SM; a
  // shape equal to one already timed (the stage target rounds to whole rows, at most 8) is left
  // out.
  using Tuning = cuda::PermuteTuning;
  auto sweep = [&](const std::string& what, double bytes, const Tuning& library,
                   const std::vector<Tuning>& tunings,
                   const std::function<void(const Tuning&, cudaStream_t)>& run) {
    std::vector<std::pair<int64_t, int>> timed = {{cuda::permute_stage_rows(H, library), 0}};
    for (const Tuning& t : tunings) {
      const std::pair<int64_t, int> shape{cuda::permute_stage_rows(H, t), t.ctas_per_sm};
      if (std::find(timed.begin(), timed.end(), shape) != timed.end()) continue;
      timed.push_back(shape);
      const std::string ctas = t.ctas_per_sm ? std::to_string(t.ctas_per_sm) + "/SM" : "max/SM";
      kernels.push_back({what + " " + std::to_string(shape.first) + " rows " + ctas, "", bytes,
                         Target::kNone, [run, t](cudaStream_t s) { run(t, s); }});
    }
  };
  sweep("permute", permute_bytes, cuda::kPermuteCopyTuning,
        {Tuning{.stage_bytes = 8 << 10}, Tuning{.stage_bytes = 16 << 10},
         Tuning{.stage_bytes = 20 << 10}, Tuning{.stage_bytes = 24 << 10},
         Tuning{.stage_bytes = 32 << 10}, Tuning{.stage_bytes = 64 << 10},
         Tuning{.stage_bytes = 32 << 10, .ctas_per_sm = 2},
         Tuning{.stage_bytes = 16 << 10, .ctas_per_sm = 4}},
        [&](const Tuning& t, cudaStream_t s) {
          cuda::permute_tuned(x.view(DType::kBFloat16, {T, H}), v_row_of, v_tor,
                              xs.view(DType::kBFloat16, {R, H}), none, t, s);
        });
  // The quantising permute holds a code row per token in each of two code buffers besides its x
  // stages, so the stage size also sets how many one-warp CTAs (and warps doing the arithmetic)
  // an SM holds.
  sweep("permute_quantize_fp8", quant_bytes, Tuning{},
        {Tuning{.stage_bytes = 1}, Tuning{.stage_bytes = 16 << 10},
         Tuning{.stage_bytes = 32 << 10}, Tuning{.stage_bytes = 1, .ctas_per_sm = 8},
         Tuning{.stage_bytes = 8 << 10, .ctas_per_sm = 4},
         Tuning{.stage_bytes = 16 << 10, .ctas_per_sm = 2}},
        [&](const Tuning& t, cudaStream_t s) {
          cuda::permute_quantize_fp8_tuned(
              x.view(DType::kBFloat16, {T, H}), v_row_of, v_tor,
              xs_fp8.view(DType::kFloat8E4M3, {R, H}),
              xs_scales.view(DType::kFloat32, {scale_groups, scale_pitch}), none, t, s);
        });
  MOEFUSE_CUDA_CHECK(cudaStreamSynchronize(stream));
  const TorchTimes torch = torch_times(c, T, torch_wanted);
  time_kernels(name, kernels, torch, report, stream);
}

int run_dispatch(Args& args) {
  const std::string preset_arg = args.get("preset", "all");
  const int64_t T = args.get_int("tokens", 16384, 1, 1 << 24);
  // A multiple of 8: rows move as 16-byte vectors.
  const int64_t hidden = args.get_int("hidden", 0, 0, 1 << 16);
  MOEFUSE_EXPECT(hidden % 8 == 0, "--hidden", "0 (the preset's) or a multiple of 8",
                 std::to_string(hidden));
  const std::string routing = args.get("routing", "uniform");
  const RoutingDistribution dist = parse_routing(routing);
  const std::string json = args.get("json", "");
  const uint64_t seed = static_cast<uint64_t>(args.get_int("seed", 1234, 0, INT64_MAX));
  const bool torch = !args.flag("no-torch");
  args.finish();
  if (gpu_missing("dispatch")) return 0;
  std::vector<std::string_view> presets;
  if (preset_arg == "all") {
    presets = preset_names();
  } else {
    preset(preset_arg);  // throws InvalidArgument with the known names
    presets.push_back(preset_arg);
  }
  cudaStream_t stream = nullptr;
  MOEFUSE_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  Report report("dispatch: router and token dispatch kernels (torch_us -1: not measured)",
                {"preset", "kernel", "median_us", "MB", "TB/s", "copy_TB/s", "vs_copy",
                 "TFLOP/s", "torch_us", "speedup", "target", "met"});
  report.set_meta("tokens", static_cast<long long>(T));
  report.set_meta("routing", routing);
  report.set_meta("reproduce", args.command());
  cublasHandle_t cublas = nullptr;
  if (cublasCreate(&cublas) != CUBLAS_STATUS_SUCCESS) {
    std::printf("dispatch: could not create a cuBLAS handle\n");
    return 1;
  }
  for (auto name : presets)
    run_preset(name, hidden, T, dist, seed, torch, cublas, report, stream);
  MOEFUSE_CUDA_CHECK(cudaStreamSynchronize(stream));
  cublasDestroy(cublas);
  cudaStreamDestroy(stream);
  report.print();
  if (!json.empty()) write_json_file(json, args.command(), {&report});
  return 0;
}

}  // namespace

MOEFUSE_BENCH_MODE(dispatch, "dispatch",
                   "router top-k, maps, permute, combine (+ backward) vs copy bandwidth and torch",
                   "[--preset NAME|all] [--tokens 16384] [--hidden H] "
                   "[--routing uniform|zipf|balanced] [--seed 1234] [--json FILE] [--no-torch]",
                   run_dispatch);

}  // namespace moefuse::bench
