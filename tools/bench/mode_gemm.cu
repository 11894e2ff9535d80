// `moefuse-bench gemm`: the expert-MLP grouped GEMMs (FC1 with its activation, FC2 with the routing
// probability) against, in the same run: one dense cuBLAS GEMM of the same total size (the bound),
// a per-expert cuBLAS loop, torch._grouped_mm (+ silu·mul), and our own unfused twin.
#include <cuda_bf16.h>

#include <cmath>
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include "bench/cublas_baseline.h"
#include "bench/device_buffer.h"
#include "bench/mode.h"
#include "bench/report.h"
#include "bench/routing.h"
#include "bench/gemm_bench.h"
#include "bench/timing.h"
#include "cuda/check.h"
#include "moefuse/config.h"
#include "moefuse/grouped_gemm.h"

namespace moefuse::bench {
namespace {

// Device buffers of one preset's expert MLP at T tokens, filled with fresh random data.
struct MlpBuffers {
  DeviceBuffer x, xs, gathered, w1, b1, pre, act, w2, b2, ys, scale, offsets, token_of_row;

  MlpBuffers(const MoeConfig& c, int64_t tokens, const SyntheticRouting& r, uint64_t seed) {
    const int64_t m = tokens * c.top_k, h = c.hidden, f = c.ffn, e = c.num_experts;
    const int64_t fc1 = c.fc1_width();
    const size_t bf = sizeof(__nv_bfloat16);
    x = DeviceBuffer(tokens * h * bf);
    xs = DeviceBuffer(m * h * bf);
    gathered = DeviceBuffer(m * h * bf);  // the unfused gather's x rows
    w1 = DeviceBuffer(e * fc1 * h * bf);
    b1 = DeviceBuffer(e * fc1 * sizeof(float));
    pre = DeviceBuffer(m * fc1 * bf);
    act = DeviceBuffer(m * f * bf);
    w2 = DeviceBuffer(e * h * f * bf);
    b2 = DeviceBuffer(e * h * sizeof(float));
    ys = DeviceBuffer(m * h * bf);
    scale = DeviceBuffer(m * sizeof(float));
    offsets = upload(r.offsets);
    token_of_row = upload(r.token_of_row);
    const float w1_range = 1.0f / std::sqrt(static_cast<float>(h));
    const float w2_range = 1.0f / std::sqrt(static_cast<float>(f));
    fill_uniform_bf16(x.get(), tokens * h, -1, 1, seed + 1, nullptr);
    fill_uniform_bf16(xs.get(), m * h, -1, 1, seed + 2, nullptr);
    fill_uniform_bf16(w1.get(), e * fc1 * h, -w1_range, w1_range, seed + 3, nullptr);
    fill_uniform_fp32(b1.get(), e * fc1, -0.1f, 0.1f, seed + 4, nullptr);
    fill_uniform_bf16(act.get(), m * f, -1, 1, seed + 5, nullptr);
    fill_uniform_bf16(w2.get(), e * h * f, -w2_range, w2_range, seed + 6, nullptr);
    fill_uniform_fp32(b2.get(), e * h, -0.1f, 0.1f, seed + 7, nullptr);
    fill_uniform_fp32(scale.get(), m, 0.0f, 1.0f, seed + 8, nullptr);
    MOEFUSE_CUDA_CHECK(cudaDeviceSynchronize());
  }
};

void bench_preset(const std::string& name, const GemmBenchOptions& o, CublasBaseline& cublas,
                  Report& report) {
  MoeConfig c = preset(name);
  const int64_t t = o.tokens, m = t * c.top_k, h = c.hidden, f = c.ffn, e = c.num_experts;
  const int64_t fc1 = c.fc1_width();
  const uint64_t seed = 0x5eed0000 + std::hash<std::string>{}(name);
  progress("gemm " + name + ": routing and random data");
  SyntheticRouting routing = draw_routing(t, e, c.top_k, o.routing, seed);
  MlpBuffers buf(c, t, routing, seed);
  cudaStream_t stream = nullptr;

  auto time = [&](const std::string& what, auto&& launch) {
    progress("gemm " + name + ": " + what);
    return time_on_stream(launch, stream, o.warmup, o.iters, o.warm_ms).median_ms;
  };
  auto empty = TensorView{};
  auto bias1 = c.expert_bias ? buf.b1.view(DType::kFloat32, {e, fc1}) : empty;
  auto bias2 = c.expert_bias ? buf.b2.view(DType::kFloat32, {e, h}) : empty;

  const GroupedGemmArgs fc1_args{
      .a = buf.xs.view(DType::kBFloat16, {m, h}),
      .b = buf.w1.view(DType::kBFloat16, {e, fc1, h}),
      .offsets = buf.offsets.view(DType::kInt32, {e + 1}),
      .d = buf.act.view(DType::kBFloat16, {m, f}),
      .epilogue = GemmEpilogue::kActivation,
      .activation = c.activation,
      .clamped_swiglu = c.clamped_swiglu,
      .bias = bias1};
  GroupedGemmArgs fc1_save = fc1_args;
  fc1_save.pre_activation = buf.pre.view(DType::kBFloat16, {m, fc1});
  GroupedGemmArgs fc1_gather = fc1_args;
  fc1_gather.a = buf.x.view(DType::kBFloat16, {t, h});
  fc1_gather.gather_index = buf.token_of_row.view(DType::kInt32, {m});
  GroupedGemmArgs fc1_gather_save = fc1_gather;
  fc1_gather_save.pre_activation = fc1_save.pre_activation;
  const GroupedGemmArgs fc2_args{.a = buf.act.view(DType::kBFloat16, {m, f}),
                                 .b = buf.w2.view(DType::kBFloat16, {e, h, f}),
                                 .offsets = buf.offsets.view(DType::kInt32, {e + 1}),
                                 .d = buf.ys.view(DType::kBFloat16, {m, h}),
                                 .bias = bias2,
                                 .row_scale = buf.scale.view(DType::kFloat32, {m})};

  const double fc1_flops = 2.0 * m * fc1 * h, fc2_flops = 2.0 * m * h * f;
  const double fc1_dense = time("fc1 cuBLAS dense", [&](cudaStream_t s) {
    cublas.gemm_bf16(buf.xs.get(), buf.w1.get(), buf.pre.get(), m, fc1, h, s);
  });
  const double fc2_dense = time("fc2 cuBLAS dense", [&](cudaStream_t s) {
    cublas.gemm_bf16(buf.act.get(), buf.w2.get(), buf.ys.get(), m, h, f, s);
  });
  const double fc1_loop = time("fc1 cuBLAS per expert", [&](cudaStream_t s) {
    cublas.per_expert_bf16(buf.xs.get(), buf.w1.get(), buf.pre.get(), routing.offsets, fc1, h, s);
  });
  const double fc2_loop = time("fc2 cuBLAS per expert", [&](cudaStream_t s) {
    cublas.per_expert_bf16(buf.act.get(), buf.w2.get(), buf.ys.get(), routing.offsets, h, f, s);
  });
  const double fc1_fused = time("fc1 fused", [&](cudaStream_t s) { grouped_gemm(fc1_args, s); });
  const double fc1_fused_save =
      time("fc1 fused + saved pre-activation", [&](cudaStream_t s) { grouped_gemm(fc1_save, s); });
  const double fc1_unfused = time("fc1 unfused", [&](cudaStream_t s) {
    grouped_gemm_unfused(fc1_save, {}, s);
  });
  const double fc1_gathered =
      time("fc1 gather-fused", [&](cudaStream_t s) { grouped_gemm(fc1_gather, s); });
  const double fc1_gathered_save = time("fc1 gather-fused + saved pre-activation",
                                        [&](cudaStream_t s) { grouped_gemm(fc1_gather_save, s); });
  // The gather-fused FC1's own twin: gather kernel, plain GEMM, activation kernel.
  const double fc1_unfused_gather = time("fc1 unfused gather", [&](cudaStream_t s) {
    grouped_gemm_unfused(fc1_gather_save,
                         {.gathered_a = buf.gathered.view(DType::kBFloat16, {m, h})}, s);
  });
  const double fc2_fused = time("fc2 fused", [&](cudaStream_t s) { grouped_gemm(fc2_args, s); });
  const double fc2_unfused =
      time("fc2 unfused", [&](cudaStream_t s) { grouped_gemm_unfused(fc2_args, {}, s); });

  progress("gemm " + name + ": torch");
  const std::string problems = " --problem fc1:" + std::to_string(fc1) + ":" + std::to_string(h) +
                               (is_glu(c.activation) ? ":swiglu" : ":plain") + " --problem fc2:" +
                               std::to_string(h) + ":" + std::to_string(f) + ":plain";
  const TorchGemmTimings torch =
      run_torch_gemm("bench/torch_gemm.py", routing.counts, problems, o);
  progress_done();

  auto row = [&](const std::string& op, const std::string& variant, double ms, double flops,
                 double dense_ms, std::optional<double> torch_ref, std::optional<double> unfused) {
    add_gemm_row(report, name, op, variant, ms, flops, dense_ms, torch_ref, unfused);
  };
  const auto torch_fc1_act = is_glu(c.activation) ? torch.at("fc1.grouped_mm+silu_mul")
                                                   : torch.at("fc1.grouped_mm");
  row("fc1", "cublas dense (bound)", fc1_dense, fc1_flops, fc1_dense, std::nullopt, std::nullopt);
  row("fc1", "cublas per-expert loop", fc1_loop, fc1_flops, fc1_dense, std::nullopt, std::nullopt);
  if (auto tm = torch.at("fc1.grouped_mm"))
    row("fc1", "torch grouped_mm (no act)", *tm, fc1_flops, fc1_dense, std::nullopt, std::nullopt);
  if (torch_fc1_act && is_glu(c.activation))
    row("fc1", "torch grouped_mm+silu_mul", *torch_fc1_act, fc1_flops, fc1_dense, std::nullopt,
        std::nullopt);
  const std::string act = std::string(activation_name(c.activation));
  row("fc1", "moefuse unfused +" + act, fc1_unfused, fc1_flops, fc1_dense, torch_fc1_act,
      std::nullopt);
  row("fc1", "moefuse fused +" + act, fc1_fused, fc1_flops, fc1_dense, torch_fc1_act, fc1_unfused);
  row("fc1", "moefuse fused +" + act + " +save pre", fc1_fused_save, fc1_flops, fc1_dense,
      torch_fc1_act, fc1_unfused);
  row("fc1", "moefuse unfused gather +" + act, fc1_unfused_gather, fc1_flops, fc1_dense,
      torch_fc1_act, std::nullopt);
  row("fc1", "moefuse gather-fused +" + act, fc1_gathered, fc1_flops, fc1_dense, torch_fc1_act,
      fc1_unfused_gather);
  row("fc1", "moefuse gather-fused +" + act + " +save pre", fc1_gathered_save, fc1_flops,
      fc1_dense, torch_fc1_act, fc1_unfused_gather);
  row("fc2", "cublas dense (bound)", fc2_dense, fc2_flops, fc2_dense, std::nullopt, std::nullopt);
  row("fc2", "cublas per-expert loop", fc2_loop, fc2_flops, fc2_dense, std::nullopt, std::nullopt);
  if (auto tm = torch.at("fc2.grouped_mm"))
    row("fc2", "torch grouped_mm (no scale)", *tm, fc2_flops, fc2_dense, std::nullopt,
        std::nullopt);
  row("fc2", "moefuse unfused +scale", fc2_unfused, fc2_flops, fc2_dense,
      torch.at("fc2.grouped_mm"), std::nullopt);
  row("fc2", "moefuse fused +scale", fc2_fused, fc2_flops, fc2_dense, torch.at("fc2.grouped_mm"),
      fc2_unfused);
  if (!torch.ms)
    std::printf("   torch (%s): unavailable, %s\n", name.c_str(), torch.unavailable.c_str());
}

int run(Args& args) {
  const GemmBenchOptions o = parse_gemm_bench_options(args);
  if (gpu_missing("gemm")) return 0;
  Report report = make_gemm_report(
      "grouped GEMM (bf16 in, fp32 accumulate, bf16 out)", o,
      tile_text(grouped_gemm_tile(256)) + "; " + tile_text(grouped_gemm_tile(192)) +
          " where 192 divides N and 256 does not",
      "vs_dense = dense cuBLAS time / this time (the same FLOPs); vs_torch and vs_unfused = "
      "their time / this time");
  CublasBaseline cublas;
  for (const auto& name : o.presets) bench_preset(name, o, cublas, report);
  finish_gemm_report(report, o, args);
  return 0;
}

}  // namespace

MOEFUSE_BENCH_MODE(gemm, "gemm", "expert-MLP grouped GEMMs vs cuBLAS dense, per-expert loop, torch",
                   kGemmBenchOptions, run);

}  // namespace moefuse::bench
