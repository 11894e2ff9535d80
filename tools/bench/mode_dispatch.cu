// moefuse-bench dispatch: the router and dispatch kernels per preset, as achieved bytes per
// second against a device-to-device copy of the same traffic measured in the same run, and
// against the same step in torch (bench/torch_dispatch.py).
//
// Bytes are the minimum traffic of each kernel (every input read once, every output written
// once); the copy baseline is cudaMemcpyAsync of bytes/2 (a copy reads and writes each byte).
// Router kernels read random logits; with --routing zipf the dispatch kernels get skewed routes.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "bench/device_buffer.h"
#include "bench/mode.h"
#include "bench/report.h"
#include "bench/routing.h"
#include "bench/timing.h"
#include "bench/torch_runner.h"
#include "cuda/check.h"
#include "cuda/device.h"
#include "moefuse/config.h"
#include "moefuse/dispatch.h"
#include "moefuse/router.h"

namespace moefuse::bench {
namespace {

constexpr int kWarmup = 5, kIters = 50;

struct Kernel {
  std::string name;
  std::string torch_name;  // the torch line it compares with ("" for none)
  double bytes;
  std::function<void(cudaStream_t)> launch;
};

void run_preset(std::string_view name, int64_t T, RoutingDistribution dist, uint64_t seed,
                Report& report, cudaStream_t stream) {
  const MoeConfig c = preset(name);
  const int64_t H = c.hidden, E = c.num_experts, k = c.top_k, R = T * k;
  const bool sigmoid = c.router.kind == RouterKind::kSigmoidGroupTopK;
  const SyntheticRouting routing = draw_routing(T, E, k, dist, seed);

  DeviceBuffer logits(4 * T * E), bias(4 * E), probs(4 * T * k), f(4 * E), P(4 * E), losses(8),
      idx(4 * T * k), counts(4 * E), d_logits(4 * T * E), d_probs(4 * T * k), d_probs_out(4 * T * k);
  fill_uniform_fp32(logits.get(), T * E, -4, 4, seed + 1, stream);
  fill_uniform_fp32(bias.get(), E, -0.1f, 0.1f, seed + 2, stream);
  fill_uniform_fp32(d_probs.get(), T * k, -1, 1, seed + 3, stream);
  DeviceBuffer routes = upload(routing.expert_idx), offsets(4 * (E + 1)), row_of(4 * T * k),
               token_of_row(4 * R);
  DeviceBuffer x(2 * T * H), xs(2 * R * H), ys(2 * R * H), y(2 * T * H), dy(2 * T * H),
      dys(2 * R * H);
  fill_uniform_bf16(x.get(), T * H, -1, 1, seed + 4, stream);
  fill_uniform_bf16(ys.get(), R * H, -1, 1, seed + 5, stream);
  fill_uniform_bf16(dy.get(), T * H, -1, 1, seed + 6, stream);
  DeviceBuffer ws_router(router_topk_workspace_size(T, E)),
      ws_maps(dispatch_maps_workspace_size(T, E));
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
  route(stream);  // counts and idx for the backward; maps for the row kernels
  maps(stream);

  const double act = 2.0 * T * H;  // one bf16 [T, H]
  std::vector<Kernel> kernels = {
      {"router_topk", "router", 4.0 * T * E + 8.0 * T * k, route},
      {"dispatch_maps", "", 4.0 * T * k * 2 + 4.0 * R, maps},
      {"permute", "permute", act * (1 + k) + 4.0 * T * k,
       [&](cudaStream_t s) {
         permute(x.view(DType::kBFloat16, {T, H}), v_row_of, v_tor,
                 xs.view(DType::kBFloat16, {R, H}), none, s);
       }},
      {"combine", "combine", act * (1 + k) + 8.0 * T * k,
       [&](cudaStream_t s) {
         combine(ys.view(DType::kBFloat16, {R, H}), v_probs, v_row_of,
                 y.view(DType::kBFloat16, {T, H}), none, s);
       }},
      {"combine_backward", "combine_backward", act * (1 + 2 * k) + 12.0 * T * k,
       [&](cudaStream_t s) {
         combine_backward(dy.view(DType::kBFloat16, {T, H}), ys.view(DType::kBFloat16, {R, H}),
                          v_probs, v_row_of, v_tor, dys.view(DType::kBFloat16, {R, H}),
                          d_probs_out.view(DType::kFloat32, {T, k}), none, s);
       }},
      {"router_backward", "", 8.0 * T * E + 8.0 * T * k,
       [&](cudaStream_t s) {
         router_topk_backward(c.router, k, v_logits, v_idx, v_counts,
                              d_probs.view(DType::kFloat32, {T, k}),
                              d_logits.view(DType::kFloat32, {T, E}), s);
       }},
  };

  double max_bytes = 0;
  for (const auto& kr : kernels) max_bytes = std::max(max_bytes, kr.bytes);
  DeviceBuffer copy_src(static_cast<size_t>(max_bytes / 2) + 16),
      copy_dst(static_cast<size_t>(max_bytes / 2) + 16);

  char torch_args[256];
  std::snprintf(torch_args, sizeof torch_args,
                "--tokens %lld --hidden %lld --experts %lld --topk %lld --router %s",
                static_cast<long long>(T), static_cast<long long>(H), static_cast<long long>(E),
                static_cast<long long>(k), sigmoid ? "sigmoid" : "softmax");
  std::string why;
  const auto torch = run_torch_baseline("bench/torch_dispatch.py", torch_args, &why);
  if (!torch) std::printf("torch: unavailable (%s)\n", why.c_str());

  for (size_t i = 0; i < kernels.size(); ++i) {
    const Kernel& kr = kernels[i];
    progress("[" + std::string(name) + " " + std::to_string(i + 1) + "/" +
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
    report.add_row({std::string(name), kr.name, t.median_ms * 1e3, kr.bytes / 1e6, tbs, copy_tbs,
                    tbs / copy_tbs, torch_us, speedup});
  }
  progress_done();
}

int run_dispatch(Args& args) {
  const std::string preset_arg = args.get("preset", "all");
  const int64_t T = args.get_int("tokens", 16384, 0, 1 << 24);
  const std::string routing = args.get("routing", "uniform");
  const RoutingDistribution dist = parse_routing(routing);
  const std::string json = args.get("json", "");
  const uint64_t seed = static_cast<uint64_t>(args.get_int("seed", 1234, 0, INT64_MAX));
  args.finish();
  std::string why;
  if (!cuda::hopper_available(&why)) {
    std::printf("dispatch: no GPU (%s)\n", why.c_str());
    return 1;
  }
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
                 "torch_us", "speedup"});
  report.set_meta("tokens", static_cast<long long>(T));
  report.set_meta("routing", routing);
  report.set_meta("reproduce", args.command());
  for (auto name : presets) run_preset(name, T, dist, seed, report, stream);
  MOEFUSE_CUDA_CHECK(cudaStreamSynchronize(stream));
  cudaStreamDestroy(stream);
  report.print();
  if (!json.empty()) write_json_file(json, args.command(), {&report});
  return 0;
}

}  // namespace

MOEFUSE_BENCH_MODE(dispatch, "dispatch",
                   "router top-k, maps, permute, combine (+ backward) vs copy bandwidth and torch",
                   run_dispatch);

}  // namespace moefuse::bench
