// `moefuse-bench gemm-backward`: the expert MLPs' backward grouped GEMMs (FC2 dgrad fused with
// dGLU + dp and its unfused twin, FC1 dgrad, dW1 plain / gather-fused / gather-unfused, dW2;
// with bf16 outputs also dW1 on the permuted rows (the layer's since session 34), dW1 on a
// gather kernel's rows (its dW1 before) and dW2)
// against, in the same run: one dense cuBLAS GEMM of the same M, N, K (the bound; for a wgrad
// K = all rows, so it writes 1/E of the output), a strided-batched cuBLAS wgrad over E equal
// slices (every expert's fp32 output written), and torch._grouped_mm's autograd backward on the
// exact counts (bench/torch_gemm_backward.py).
#include <cuda_bf16.h>

#include <cmath>
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include "bench/cublas_backward.h"
#include "bench/device_buffer.h"
#include "bench/mode.h"
#include "bench/report.h"
#include "bench/routing.h"
#include "bench/gemm_bench.h"
#include "bench/timing.h"
#include "cuda/check.h"
#include "cuda/gemm/backward/config.h"
#include "moefuse/config.h"
#include "moefuse/grouped_gemm_backward.h"

namespace moefuse::bench {
namespace {

// Device buffers of one preset's expert-MLP backward at T tokens, inputs filled with fresh
// random data (outputs are written by every timed call before anything reads them).
struct BackwardBuffers {
  DeviceBuffer x, xs, w1, w2, b2, pre, dys, scale;              // inputs
  DeviceBuffer d_pre, scaled_act, dp, d_b2, dp_partial, bias_partial, d_b2_units, g,
      gathered;  // out, scratch
  DeviceBuffer dxs, dw1, dw2, offsets, token_of_row;

  BackwardBuffers(const MoeConfig& c, int64_t tokens, const SyntheticRouting& r, uint64_t seed) {
    const int64_t m = tokens * c.top_k, h = c.hidden, f = c.ffn, e = c.num_experts;
    const int64_t fc1 = c.fc1_width();
    const size_t bf = sizeof(__nv_bfloat16), f32 = sizeof(float);
    x = DeviceBuffer(tokens * h * bf);
    xs = DeviceBuffer(m * h * bf);
    w1 = DeviceBuffer(e * fc1 * h * bf);
    w2 = DeviceBuffer(e * h * f * bf);
    b2 = DeviceBuffer(e * h * f32);
    pre = DeviceBuffer(m * fc1 * bf);
    dys = DeviceBuffer(m * h * bf);
    scale = DeviceBuffer(m * f32);
    d_pre = DeviceBuffer(m * fc1 * bf);
    scaled_act = DeviceBuffer(m * f * bf);
    dp = DeviceBuffer(m * f32);
    d_b2 = DeviceBuffer(e * h * f32);
    dp_partial = DeviceBuffer(m * fc2_dgrad_dp_blocks(f) * f32);
    bias_partial = DeviceBuffer(fc2_dgrad_bias_pieces(h) * m * f32);
    d_b2_units = DeviceBuffer(fc2_dgrad_d_b2_units(m, e) * h * f32);
    g = DeviceBuffer(m * f * bf);
    gathered = DeviceBuffer(m * h * bf);
    dxs = DeviceBuffer(m * h * bf);
    dw1 = DeviceBuffer(e * fc1 * h * f32);
    dw2 = DeviceBuffer(e * h * f * f32);
    offsets = upload(r.offsets);
    token_of_row = upload(r.token_of_row);
    const float w1_range = 1.0f / std::sqrt(static_cast<float>(h));
    const float w2_range = 1.0f / std::sqrt(static_cast<float>(f));
    fill_uniform_bf16(x.get(), tokens * h, -1, 1, seed + 1, nullptr);
    fill_uniform_bf16(xs.get(), m * h, -1, 1, seed + 2, nullptr);
    fill_uniform_bf16(w1.get(), e * fc1 * h, -w1_range, w1_range, seed + 3, nullptr);
    fill_uniform_bf16(w2.get(), e * h * f, -w2_range, w2_range, seed + 4, nullptr);
    fill_uniform_fp32(b2.get(), e * h, -0.1f, 0.1f, seed + 5, nullptr);
    fill_uniform_bf16(pre.get(), m * fc1, -2, 2, seed + 6, nullptr);
    fill_uniform_bf16(dys.get(), m * h, -1, 1, seed + 7, nullptr);
    fill_uniform_fp32(scale.get(), m, 0.0f, 1.0f, seed + 8, nullptr);
    // d_pre and scaled_act are inputs of FC1 dgrad / the wgrads before the FC2 dgrad writes them.
    fill_uniform_bf16(d_pre.get(), m * fc1, -1, 1, seed + 9, nullptr);
    fill_uniform_bf16(scaled_act.get(), m * f, -1, 1, seed + 10, nullptr);
    MOEFUSE_CUDA_CHECK(cudaDeviceSynchronize());
  }
};

void bench_preset(const std::string& name, const GemmBenchOptions& o, CublasBackward& cublas,
                  Report& report) {
  const MoeConfig c = preset(name);
  const int64_t t = o.tokens, m = t * c.top_k, h = c.hidden, f = c.ffn, e = c.num_experts;
  const int64_t fc1 = c.fc1_width();
  const uint64_t seed = 0x5eedbac0 + std::hash<std::string>{}(name);
  progress("gemm-backward " + name + ": routing and random data");
  const SyntheticRouting routing = draw_routing(t, e, c.top_k, o.routing, seed);
  BackwardBuffers buf(c, t, routing, seed);
  cudaStream_t stream = nullptr;

  auto time = [&](const std::string& what, auto&& launch) {
    progress("gemm-backward " + name + ": " + what);
    return time_on_stream(launch, stream, o.warmup, o.iters, o.warm_ms).median_ms;
  };
  const TensorView offsets = buf.offsets.view(DType::kInt32, {e + 1});

  const Fc2DgradArgs fc2{
      .dys = buf.dys.view(DType::kBFloat16, {m, h}),
      .w2 = buf.w2.view(DType::kBFloat16, {e, h, f}),
      .offsets = offsets,
      .pre = buf.pre.view(DType::kBFloat16, {m, fc1}),
      .d_pre = buf.d_pre.view(DType::kBFloat16, {m, fc1}),
      .activation = c.activation,
      .clamped_swiglu = c.clamped_swiglu,
      .row_scale = buf.scale.view(DType::kFloat32, {m}),
      .scaled_act = buf.scaled_act.view(DType::kBFloat16, {m, f}),
      .d_row_scale = buf.dp.view(DType::kFloat32, {m}),
      .b2 = c.expert_bias ? buf.b2.view(DType::kFloat32, {e, h}) : TensorView{},
      .d_b2 = c.expert_bias ? buf.d_b2.view(DType::kFloat32, {e, h}) : TensorView{}};
  // As the layer runs them: the fused call's b2 dots from its d_b2 pass over dys.
  const TensorView d_b2_units =
      c.expert_bias ? buf.d_b2_units.view(DType::kFloat32, {fc2_dgrad_d_b2_units(m, e), h})
                    : TensorView{};
  const Fc2DgradScratch fc2_scratch{
      .dp_partial = buf.dp_partial.view(DType::kFloat32, {m, fc2_dgrad_dp_blocks(f)}),
      .bias_partial =
          c.expert_bias
              ? buf.bias_partial.view(DType::kFloat32, {fc2_dgrad_bias_pieces(h), m})
              : TensorView{},
      .g = {},
      .d_b2_units = d_b2_units};
  const Fc2DgradScratch fc2_unfused_scratch{.dp_partial = {},
                                            .bias_partial = {},
                                            .g = buf.g.view(DType::kBFloat16, {m, f}),
                                            .d_b2_units = d_b2_units};
  const GroupedGemmDgradArgs fc1_dgrad{.a = buf.d_pre.view(DType::kBFloat16, {m, fc1}),
                                       .b = buf.w1.view(DType::kBFloat16, {e, fc1, h}),
                                       .offsets = offsets,
                                       .d = buf.dxs.view(DType::kBFloat16, {m, h})};
  const GroupedGemmWgradArgs dw1{.a = buf.d_pre.view(DType::kBFloat16, {m, fc1}),
                                 .b = buf.xs.view(DType::kBFloat16, {m, h}),
                                 .offsets = offsets,
                                 .d = buf.dw1.view(DType::kFloat32, {e, fc1, h})};
  GroupedGemmWgradArgs dw1_gather = dw1;
  dw1_gather.b = buf.x.view(DType::kBFloat16, {t, h});
  dw1_gather.gather_index = buf.token_of_row.view(DType::kInt32, {m});
  const GroupedGemmWgradUnfusedScratch gather_scratch{
      .gathered_b = buf.gathered.view(DType::kBFloat16, {m, h})};
  const GroupedGemmWgradArgs dw2{.a = buf.dys.view(DType::kBFloat16, {m, h}),
                                 .b = buf.scaled_act.view(DType::kBFloat16, {m, f}),
                                 .offsets = offsets,
                                 .d = buf.dw2.view(DType::kFloat32, {e, h, f})};

  const double fc2_flops = 2.0 * m * h * f, fc1_flops = 2.0 * m * fc1 * h;
  // Dense bounds (outputs into buffers of the right size; their contents are overwritten later).
  const double fc2_dgrad_dense = time("fc2 dgrad cuBLAS dense", [&](cudaStream_t s) {
    cublas.dgrad_bf16(buf.dys.get(), buf.w2.get(), buf.g.get(), m, f, h, s);
  });
  const double fc1_dgrad_dense = time("fc1 dgrad cuBLAS dense", [&](cudaStream_t s) {
    cublas.dgrad_bf16(buf.d_pre.get(), buf.w1.get(), buf.dxs.get(), m, h, fc1, s);
  });
  const double dw1_dense = time("dW1 cuBLAS dense", [&](cudaStream_t s) {
    cublas.wgrad_f32(buf.d_pre.get(), buf.xs.get(), buf.dw1.get(), fc1, h, m, s);
  });
  const double dw2_dense = time("dW2 cuBLAS dense", [&](cudaStream_t s) {
    cublas.wgrad_f32(buf.dys.get(), buf.scaled_act.get(), buf.dw2.get(), h, f, m, s);
  });
  const int64_t slice = m / e;  // rows per expert of the equal-count batched reference
  const double dw1_batched = time("dW1 cuBLAS batched", [&](cudaStream_t s) {
    cublas.wgrad_batched_f32(buf.d_pre.get(), buf.xs.get(), buf.dw1.get(), fc1, h, slice, e, s);
  });
  const double dw2_batched = time("dW2 cuBLAS batched", [&](cudaStream_t s) {
    cublas.wgrad_batched_f32(buf.dys.get(), buf.scaled_act.get(), buf.dw2.get(), h, f, slice, e,
                             s);
  });

  // FC1 dgrad and the wgrads read d_pre / scaled_act: time them before the FC2 dgrad rewrites
  // those (the values only matter for realism, not correctness).
  const double fc1_dgrad_ms =
      time("fc1 dgrad", [&](cudaStream_t s) { grouped_gemm_dgrad(fc1_dgrad, s); });
  const double dw1_ms = time("dW1 wgrad", [&](cudaStream_t s) { grouped_gemm_wgrad(dw1, s); });
  const double dw1_gather_ms =
      time("dW1 wgrad gather-fused", [&](cudaStream_t s) { grouped_gemm_wgrad(dw1_gather, s); });
  const double dw1_gather_unfused_ms = time("dW1 wgrad gather unfused", [&](cudaStream_t s) {
    grouped_gemm_wgrad_unfused(dw1_gather, gather_scratch, s);
  });
  const double dw2_ms = time("dW2 wgrad", [&](cudaStream_t s) { grouped_gemm_wgrad(dw2, s); });
  // bf16 outputs (the layer's bf16 expert gradients): half the bytes written, one hand-off.
  GroupedGemmWgradArgs dw1_plain_bf16 = dw1, dw1_bf16 = dw1_gather, dw2_bf16 = dw2;
  dw1_plain_bf16.d = buf.dw1.view(DType::kBFloat16, {e, fc1, h});
  dw1_bf16.d = buf.dw1.view(DType::kBFloat16, {e, fc1, h});
  dw2_bf16.d = buf.dw2.view(DType::kBFloat16, {e, h, f});
  const double dw1_plain_bf16_ms = time(
      "dW1 wgrad, bf16 out", [&](cudaStream_t s) { grouped_gemm_wgrad(dw1_plain_bf16, s); });
  const double dw1_bf16_ms = time("dW1 wgrad gather unfused, bf16 out", [&](cudaStream_t s) {
    grouped_gemm_wgrad_unfused(dw1_bf16, gather_scratch, s);
  });
  const double dw2_bf16_ms = time("dW2 wgrad, bf16 out",
                                  [&](cudaStream_t s) { grouped_gemm_wgrad(dw2_bf16, s); });
  const double fc2_fused_ms = time("fc2 dgrad fused", [&](cudaStream_t s) {
    grouped_gemm_fc2_dgrad(fc2, fc2_scratch, s);
  });
  const double fc2_unfused_ms = time("fc2 dgrad unfused", [&](cudaStream_t s) {
    grouped_gemm_fc2_dgrad_unfused(fc2, fc2_unfused_scratch, s);
  });

  progress("gemm-backward " + name + ": torch");
  const std::string problems = " --problem fc1:" + std::to_string(fc1) + ":" + std::to_string(h) +
                               " --problem fc2:" + std::to_string(h) + ":" + std::to_string(f);
  const TorchGemmTimings torch =
      run_torch_gemm("bench/torch_gemm_backward.py", routing.counts, problems, o);
  progress_done();

  auto row = [&](const std::string& op, const std::string& variant, double ms, double flops,
                 double dense_ms, std::optional<double> torch_ref, std::optional<double> unfused) {
    add_gemm_row(report, name, op, variant, ms, flops, dense_ms, torch_ref, unfused);
  };
  const std::string epilogue = " +d" + std::string(activation_name(c.activation)) +
                               (c.expert_bias ? " +dp +d_b2" : " +dp");
  auto with_torch = [&](const std::string& op, const std::string& key, double flops,
                        double dense_ms) {
    if (auto tm = torch.at(key))
      row(op, "torch _grouped_mm backward", *tm, flops, dense_ms, std::nullopt, std::nullopt);
    return torch.at(key);
  };

  row("fc2 dgrad", "cublas dense (bound)", fc2_dgrad_dense, fc2_flops, fc2_dgrad_dense,
      std::nullopt, std::nullopt);
  const auto torch_fc2_dgrad = with_torch("fc2 dgrad", "fc2.dgrad", fc2_flops, fc2_dgrad_dense);
  row("fc2 dgrad", "moefuse unfused" + epilogue, fc2_unfused_ms, fc2_flops, fc2_dgrad_dense,
      torch_fc2_dgrad, std::nullopt);
  row("fc2 dgrad", "moefuse fused" + epilogue, fc2_fused_ms, fc2_flops, fc2_dgrad_dense,
      torch_fc2_dgrad, fc2_unfused_ms);

  row("fc1 dgrad", "cublas dense (bound)", fc1_dgrad_dense, fc1_flops, fc1_dgrad_dense,
      std::nullopt, std::nullopt);
  const auto torch_fc1_dgrad = with_torch("fc1 dgrad", "fc1.dgrad", fc1_flops, fc1_dgrad_dense);
  row("fc1 dgrad", "moefuse", fc1_dgrad_ms, fc1_flops, fc1_dgrad_dense, torch_fc1_dgrad,
      std::nullopt);

  row("dW1", "cublas dense (bound)", dw1_dense, fc1_flops, dw1_dense, std::nullopt, std::nullopt);
  row("dW1", "cublas batched (equal counts)", dw1_batched, fc1_flops, dw1_dense, std::nullopt,
      std::nullopt);
  const auto torch_dw1 = with_torch("dW1", "fc1.wgrad", fc1_flops, dw1_dense);
  row("dW1", "moefuse", dw1_ms, fc1_flops, dw1_dense, torch_dw1, std::nullopt);
  row("dW1", "moefuse gather unfused", dw1_gather_unfused_ms, fc1_flops, dw1_dense, torch_dw1,
      std::nullopt);
  row("dW1", "moefuse gather-fused", dw1_gather_ms, fc1_flops, dw1_dense, torch_dw1,
      dw1_gather_unfused_ms);
  row("dW1", "moefuse bf16 out", dw1_plain_bf16_ms, fc1_flops, dw1_dense, torch_dw1,
      std::nullopt);
  row("dW1", "moefuse gather unfused bf16 out", dw1_bf16_ms, fc1_flops, dw1_dense, torch_dw1,
      std::nullopt);

  row("dW2", "cublas dense (bound)", dw2_dense, fc2_flops, dw2_dense, std::nullopt, std::nullopt);
  row("dW2", "cublas batched (equal counts)", dw2_batched, fc2_flops, dw2_dense, std::nullopt,
      std::nullopt);
  const auto torch_dw2 = with_torch("dW2", "fc2.wgrad", fc2_flops, dw2_dense);
  row("dW2", "moefuse", dw2_ms, fc2_flops, dw2_dense, torch_dw2, std::nullopt);
  row("dW2", "moefuse bf16 out", dw2_bf16_ms, fc2_flops, dw2_dense, torch_dw2, std::nullopt);
  if (!torch.ms)
    std::printf("   torch (%s): unavailable, %s\n", name.c_str(), torch.unavailable.c_str());
}

int run(Args& args) {
  const GemmBenchOptions o = parse_gemm_bench_options(args);
  if (gpu_missing("gemm-backward")) return 0;
  namespace cfg = gemm::bwd;
  Report report = make_gemm_report(
      "backward grouped GEMMs (bf16 in, fp32 accumulate; dgrad bf16 out, wgrad fp32 out)", o,
      tile_text({.block_m = cfg::kBlockM,
                 .block_n = cfg::kBlockN,
                 .block_k = cfg::DgradStages::kBlockK,
                 .stages = cfg::DgradStages::kStages}),
      "vs_dense = dense cuBLAS time of the same M, N, K / this time (for a wgrad K = all rows: "
      "1/E of the output); vs_torch and vs_unfused = their time / this time; torch's wgrad "
      "writes bf16, ours fp32");
  report.set_meta("wgrad stages", std::to_string(cfg::WgradStages::kStages) + " of " +
                                      std::to_string(cfg::WgradStages::kBlockK) +
                                      " K rows");
  CublasBackward cublas;
  for (const auto& name : o.presets) bench_preset(name, o, cublas, report);
  finish_gemm_report(report, o, args);
  return 0;
}

}  // namespace

MOEFUSE_BENCH_MODE(gemm_backward, "gemm-backward",
                   "expert-MLP backward grouped GEMMs vs dense cuBLAS and torch autograd",
                   kGemmBenchOptions, run);

}  // namespace moefuse::bench
