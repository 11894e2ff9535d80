// `moefuse-bench gemm-fp8`: the FP8 grouped GEMM (moefuse/grouped_gemm_fp8.h), DeepSeek-V3 recipe
// and MXFP8 recipe (its exact emulation: two dequantise passes + the BF16 grouped GEMM), against,
// in the same run, the BF16 grouped GEMM on the same problem and one dense cuBLAS BF16 GEMM of the
// same total size. Problems: DeepGEMM's published grouped shapes (linear epilogue, bf16 out,
// every group the same size) and each preset's FC1 (its activation) and FC2 (routing
// probability) at --tokens with --routing; each FC1 also with E4M3 output (the codes and scales
// FC2 reads) beside its bf16 output plus the quantise passes that replaces. A second table splits
// the MXFP8 time: its dequantise passes alone (TB/s over the bytes they move) next to the BF16
// grouped GEMM alone. Then, per preset, the backward's FP8 GEMMs beside their BF16 twins: the
// k-grouped dW2 and the FC2 dgrad with the dGLU + dp epilogue, each also after stand-alone
// quantisation passes over its bf16 operands (the layer makes dys's copies from dy instead:
// docs/layer.md, "FP8").
//
// Beside each forward problem, torch's FP8 GEMMs in the same run (bench/torch_gemm_fp8.py; not
// with --no-torch): cuBLAS's dense FP8 GEMM with per-tensor scales (no scale inside K) and with
// DeepSeek's blockwise scales, and torch._scaled_grouped_mm with row-wise scales on the same
// expert rows.
//
// The values are quantised from random bf16 data by the GPU quantisers; the forward problems'
// DeepSeek activation scales (K-major) are random positive values, the MXFP8 runs read the same
// codes with every UE8M0 scale 2^0: the timing does not depend on them.
#include <cuda_bf16.h>

#include <array>
#include <cmath>
#include <cstdio>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "bench/cublas_baseline.h"
#include "bench/device_buffer.h"
#include "bench/gemm_bench.h"
#include "bench/mode.h"
#include "bench/report.h"
#include "bench/routing.h"
#include "bench/timing.h"
#include "cuda/check.h"
#include "cuda/gemm/fp8/mxfp8_emulation.h"
#include "cuda/layer/backward_fp8.h"
#include "moefuse/config.h"
#include "moefuse/grouped_gemm.h"
#include "moefuse/grouped_gemm_backward.h"
#include "moefuse/grouped_gemm_fp8.h"
#include "moefuse/grouped_gemm_fp8_dgrad.h"
#include "moefuse/grouped_gemm_fp8_wgrad.h"
#include "moefuse/quant.h"

namespace moefuse::bench {
namespace {

struct Problem {
  std::string name, op;
  std::vector<int32_t> offsets;  // [E+1]
  int64_t n = 0, k = 0;
  bool activation = false;
  Activation act = Activation::kSwiGLU;
  bool row_scale = false;
};

// One problem's operands in bf16 and in FP8, with fresh random data.
struct Buffers {
  DeviceBuffer a, b, d, a8, a_scales, a_scales_rows, b8, b_scales, offsets, scale;

  Buffers(const Problem& p, uint64_t seed) {
    const int64_t e = static_cast<int64_t>(p.offsets.size()) - 1, m = p.offsets.back();
    const int64_t n_out = p.activation && is_glu(p.act) ? p.n / 2 : p.n;
    const int64_t kg = fp8_scale_groups(p.k), ng = fp8_scale_groups(p.n);
    a = DeviceBuffer(m * p.k * 2);
    b = DeviceBuffer(e * p.n * p.k * 2);
    d = DeviceBuffer(m * n_out * 2);
    a8 = DeviceBuffer(m * p.k);
    a_scales = DeviceBuffer(kg * fp8_scale_rows(m) * 4);
    a_scales_rows = DeviceBuffer(m * kg * 4);
    b8 = DeviceBuffer(e * p.n * p.k);
    b_scales = DeviceBuffer(e * ng * kg * 4);
    offsets = upload(p.offsets);
    scale = DeviceBuffer(m * 4);
    const float w_range = 1.0f / std::sqrt(static_cast<float>(p.k));
    fill_uniform_bf16(a.get(), m * p.k, -1, 1, seed + 1, nullptr);
    fill_uniform_bf16(b.get(), e * p.n * p.k, -w_range, w_range, seed + 2, nullptr);
    fill_uniform_fp32(a_scales.get(), kg * fp8_scale_rows(m), 0.5f / 448, 2.0f / 448, seed + 3,
                      nullptr);
    fill_uniform_fp32(scale.get(), m, 0.0f, 1.0f, seed + 4, nullptr);
    quantize_fp8_blockwise_1x128(a.view(DType::kBFloat16, {m, p.k}),
                                 a8.view(DType::kFloat8E4M3, {m, p.k}),
                                 a_scales_rows.view(DType::kFloat32, {m, kg}), nullptr);
    quantize_fp8_blockwise_128x128(b.view(DType::kBFloat16, {e, p.n, p.k}),
                                   b8.view(DType::kFloat8E4M3, {e, p.n, p.k}),
                                   b_scales.view(DType::kFloat32, {e, ng, kg}), nullptr);
    MOEFUSE_CUDA_CHECK(cudaDeviceSynchronize());
  }
};

// The MXFP8 recipe's arguments over the DeepSeek ones' codes: UE8M0 scales (all 2^0) in the
// K-major layouts, and the emulation's workspace.
struct Mxfp8Run {
  DeviceBuffer a_scales, b_scales, workspace;
  GroupedGemmFp8Args args;

  explicit Mxfp8Run(const GroupedGemmFp8Args& fp8) : args(fp8) {
    const int64_t m = fp8.a.size(0), e = fp8.b.size(0), n = fp8.b.size(1), k = fp8.b.size(2);
    const int64_t kg = k / kMxfp8ScaleGroup;
    a_scales = DeviceBuffer(kg * mxfp8_scale_rows(m));
    b_scales = DeviceBuffer(e * kg * n);
    constexpr int kUe8m0One = 127;
    MOEFUSE_CUDA_CHECK(cudaMemset(a_scales.get(), kUe8m0One, a_scales.bytes()));
    MOEFUSE_CUDA_CHECK(cudaMemset(b_scales.get(), kUe8m0One, b_scales.bytes()));
    args.a_scales = a_scales.view(DType::kFloat8E8M0, {kg, mxfp8_scale_rows(m)});
    args.b_scales = b_scales.view(DType::kFloat8E8M0, {e, kg, n});
    args.recipe = Fp8Recipe::kMxfp8;
    workspace = DeviceBuffer(grouped_gemm_fp8_workspace_size(args));
    args.workspace = {.data = workspace.get(), .bytes = workspace.bytes()};
    validate_grouped_gemm_fp8(args);  // launch_mxfp8_dequantize takes validated arguments
  }

  // What the two dequantise passes read and write: codes, scales, bf16 copies.
  double pass_bytes() const {
    return 3.0 * double(args.a.numel() + args.b.numel()) +
           double(args.a_scales.numel() + args.b_scales.numel());
  }
};

// torch's FP8 GEMMs of a problem (bench/torch_gemm_fp8.py's variants, rows of the report).
constexpr std::array<std::pair<const char*, const char*>, 4> kTorchFp8Variants{{
    {"scaled_mm_tensorwise", "torch scaled_mm fp8 dense, per-tensor scales"},
    {"scaled_mm_tensorwise_fast_accum", "torch scaled_mm fp8 dense, per-tensor, fast accum"},
    {"scaled_mm_blockwise", "torch scaled_mm fp8 dense, 1x128 / 128x128 scales"},
    {"scaled_grouped_mm_rowwise", "torch scaled_grouped_mm fp8, row-wise scales"}}};

void bench_problem(const Problem& p, const GemmBenchOptions& o, const TorchGemmTimings& torch,
                   CublasBaseline& cublas, Report& report, Report& mx_report) {
  const int64_t e = static_cast<int64_t>(p.offsets.size()) - 1, m = p.offsets.back();
  const int64_t n_out = p.activation && is_glu(p.act) ? p.n / 2 : p.n;
  const int64_t kg = fp8_scale_groups(p.k);
  progress("gemm-fp8 " + p.name + " " + p.op + ": random data");
  Buffers buf(p, 0x5eedf8 + std::hash<std::string>{}(p.name + p.op));
  const GemmEpilogue epilogue = p.activation ? GemmEpilogue::kActivation : GemmEpilogue::kLinear;
  const TensorView row_scale = p.row_scale ? buf.scale.view(DType::kFloat32, {m}) : TensorView{};
  const GroupedGemmArgs bf16_args{.a = buf.a.view(DType::kBFloat16, {m, p.k}),
                                  .b = buf.b.view(DType::kBFloat16, {e, p.n, p.k}),
                                  .offsets = buf.offsets.view(DType::kInt32, {e + 1}),
                                  .d = buf.d.view(DType::kBFloat16, {m, n_out}),
                                  .epilogue = epilogue,
                                  .activation = p.act,
                                  .row_scale = row_scale};
  const GroupedGemmFp8Args fp8_args{
      .a = buf.a8.view(DType::kFloat8E4M3, {m, p.k}),
      .a_scales = buf.a_scales.view(DType::kFloat32, {kg, fp8_scale_rows(m)}),
      .b = buf.b8.view(DType::kFloat8E4M3, {e, p.n, p.k}),
      .b_scales = buf.b_scales.view(DType::kFloat32, {e, fp8_scale_groups(p.n), kg}),
      .offsets = buf.offsets.view(DType::kInt32, {e + 1}),
      .d = buf.d.view(DType::kBFloat16, {m, n_out}),
      .epilogue = epilogue,
      .activation = p.act,
      .row_scale = row_scale};

  auto time = [&](const std::string& what, auto&& launch) {
    progress("gemm-fp8 " + p.name + " " + p.op + ": " + what);
    return time_on_stream(launch, nullptr, o.warmup, o.iters, o.warm_ms).median_ms;
  };
  // The dense bound writes [m, n]: a scratch of that size (d may be half as wide for GLU).
  DeviceBuffer dense_out(m * p.n * 2);
  const double dense = time("cuBLAS dense bf16", [&](cudaStream_t s) {
    cublas.gemm_bf16(buf.a.get(), buf.b.get(), dense_out.get(), m, p.n, p.k, s);
  });
  const double bf16 = time("bf16 grouped", [&](cudaStream_t s) { grouped_gemm(bf16_args, s); });
  const double fp8 = time("fp8 grouped", [&](cudaStream_t s) { grouped_gemm_fp8(fp8_args, s); });
  const Mxfp8Run mx(fp8_args);
  const double mxfp8 =
      time("mxfp8 grouped", [&](cudaStream_t s) { grouped_gemm_fp8(mx.args, s); });
  const double passes = time("mxfp8 dequantise x2", [&](cudaStream_t s) {
    gemm::fp8::launch_mxfp8_dequantize(mx.args, s);
  });
  // FC1 with E4M3 output (FC2's operand in the FP8 layer) against the bf16 output followed by
  // the stand-alone 1x128 quantise and scale transpose it replaces.
  const bool e4m3_out = p.activation && n_out % 16 == 0;
  double fused_e4m3 = 0, two_pass_e4m3 = 0;
  if (e4m3_out) {
    const int64_t groups = fp8_scale_groups(n_out), rows = fp8_scale_rows(m);
    DeviceBuffer d8(m * n_out), d_scales(groups * rows * 4), d_scales_rows(m * groups * 4);
    GroupedGemmFp8Args e4m3_args = fp8_args;
    e4m3_args.d = d8.view(DType::kFloat8E4M3, {m, n_out});
    e4m3_args.d_scales = d_scales.view(DType::kFloat32, {groups, rows});
    fused_e4m3 =
        time("fp8 grouped, e4m3 out", [&](cudaStream_t s) { grouped_gemm_fp8(e4m3_args, s); });
    two_pass_e4m3 = time("fp8 grouped + quantise", [&](cudaStream_t s) {
      grouped_gemm_fp8(fp8_args, s);
      layer::quantize_rows_fp8(fp8_args.d, e4m3_args.d,
                               d_scales_rows.view(DType::kFloat32, {m, groups}),
                               e4m3_args.d_scales, s);
    });
  }
  progress_done();

  const double flops = 2.0 * m * p.n * p.k;
  const std::optional<double> torch_grouped = torch.at(p.op + ".scaled_grouped_mm_rowwise");
  auto row = [&](const std::string& variant, double ms) {
    report.add_row({p.name, p.op, variant, ms, flops / ms * 1e-9, dense / ms, bf16 / ms,
                    torch_grouped ? Cell{*torch_grouped / ms} : Cell{std::string("-")}});
  };
  row("cublas dense bf16 (bound)", dense);
  for (const auto& [key, variant] : kTorchFp8Variants)
    if (const std::optional<double> ms = torch.at(p.op + "." + key)) row(variant, *ms);
  row("moefuse bf16 grouped", bf16);
  row("moefuse fp8 grouped", fp8);
  row("moefuse mxfp8 grouped (dequantise x2 + bf16 grouped)", mxfp8);
  if (e4m3_out) {
    row("moefuse fp8 grouped, e4m3 + scales out (fused)", fused_e4m3);
    row("moefuse fp8 grouped + 1x128 quantise + transpose", two_pass_e4m3);
  }
  mx_report.add_row({p.name, p.op, passes, mx.pass_bytes() / passes * 1e-9, mxfp8, bf16,
                     mxfp8 / bf16});
}

// A backward GEMM of a preset in its three forms, timed and reported side by side: the BF16
// kernel, the FP8 kernel, and the FP8 kernel after the quantisation passes the layer runs
// before it (variants: the rows' names, in that order; vs_bf16 = the BF16 time / each time).
struct Fp8Twins {
  std::function<void(cudaStream_t)> bf16, fp8, quantise;
};
void report_fp8_twins(const std::string& name, const std::string& op, double flops,
                      const Fp8Twins& run, const std::array<std::string, 3>& variants,
                      const GemmBenchOptions& o, Report& report) {
  auto time = [&](const std::string& what, auto&& launch) {
    progress("gemm-fp8 " + name + " " + op + ": " + what);
    return time_on_stream(launch, nullptr, o.warmup, o.iters, o.warm_ms).median_ms;
  };
  const double ms[3] = {time("bf16", run.bf16), time("fp8", run.fp8),
                        time("fp8 with its quantisation", [&](cudaStream_t s) {
                          run.quantise(s);
                          run.fp8(s);
                        })};
  progress_done();
  for (int i = 0; i < 3; ++i)
    report.add_row({name, op, variants[i], ms[i], flops / ms[i] * 1e-9, ms[0] / ms[i]});
}

// A preset's dW2 = Σ dysᵀ · act (k-grouped, fp32 out): the BF16 wgrad, the FP8 wgrad on
// column-wise operands, and the FP8 path end to end (both column-wise quantisations + wgrad).
void bench_wgrad(const std::string& name, const MoeConfig& c, const std::vector<int32_t>& offsets,
                 const GemmBenchOptions& o, Report& report) {
  const int64_t e = c.num_experts, m = offsets.back(), na = c.hidden, nb = c.ffn;
  const int64_t g = fp8_colwise_groups(m, e);
  progress("gemm-fp8 " + name + " dW2: random data");
  DeviceBuffer a(m * na * 2), b(m * nb * 2), d(e * na * nb * 4), off = upload(offsets);
  DeviceBuffer at(na * g * 128), bt(nb * g * 128), sa(g * na * 4), sb(g * nb * 4);
  fill_uniform_bf16(a.get(), m * na, -1, 1, 0x5eedd1, nullptr);
  fill_uniform_bf16(b.get(), m * nb, -1, 1, 0x5eedd2, nullptr);
  const TensorView offsets_view = off.view(DType::kInt32, {e + 1});
  auto quantize = [&](cudaStream_t s) {
    quantize_fp8_colwise_grouped(a.view(DType::kBFloat16, {m, na}), offsets_view,
                                 at.view(DType::kFloat8E4M3, {na, g * 128}),
                                 sa.view(DType::kFloat32, {g, na}), s);
    quantize_fp8_colwise_grouped(b.view(DType::kBFloat16, {m, nb}), offsets_view,
                                 bt.view(DType::kFloat8E4M3, {nb, g * 128}),
                                 sb.view(DType::kFloat32, {g, nb}), s);
  };
  quantize(nullptr);
  MOEFUSE_CUDA_CHECK(cudaDeviceSynchronize());
  const TensorView dv = d.view(DType::kFloat32, {e, na, nb});
  const GroupedGemmWgradArgs bf16_args{.a = a.view(DType::kBFloat16, {m, na}),
                                       .b = b.view(DType::kBFloat16, {m, nb}),
                                       .offsets = offsets_view,
                                       .d = dv};
  const GroupedGemmFp8WgradArgs fp8_args{.at = at.view(DType::kFloat8E4M3, {na, g * 128}),
                                         .a_scales = sa.view(DType::kFloat32, {g, na}),
                                         .bt = bt.view(DType::kFloat8E4M3, {nb, g * 128}),
                                         .b_scales = sb.view(DType::kFloat32, {g, nb}),
                                         .offsets = offsets_view,
                                         .d = dv};
  report_fp8_twins(
      name, "dW2", 2.0 * m * na * nb,
      {.bf16 = [&](cudaStream_t s) { grouped_gemm_wgrad(bf16_args, s); },
       .fp8 = [&](cudaStream_t s) { grouped_gemm_fp8_wgrad(fp8_args, s); },
       .quantise = quantize},
      {"moefuse bf16 wgrad", "moefuse fp8 wgrad", "moefuse fp8 colwise quantise x2 + wgrad"}, o,
      report);
}

// A preset's FC2 dgrad with the dGLU + dp epilogue (the layer's fc2_dgrad GEMM): the BF16
// kernel, the FP8 kernel on row-wise quantised dys and W2ᵀ, and the FP8 kernel after a
// stand-alone quantisation of bf16 dys (the 1x128 pass and its scale transpose; the layer
// quantises dys from dy in its combine_bwd stage instead).
void bench_fc2_dgrad(const std::string& name, const MoeConfig& c,
                     const std::vector<int32_t>& offsets, const GemmBenchOptions& o,
                     Report& report) {
  const int64_t e = c.num_experts, m = offsets.back(), h = c.hidden, f = c.ffn;
  const int64_t fc1 = c.fc1_width(), hg = fp8_scale_groups(h), fg = fp8_scale_groups(f);
  const int64_t scale_rows = fp8_scale_rows(m);
  progress("gemm-fp8 " + name + " fc2 dgrad: random data");
  DeviceBuffer dys(m * h * 2), w2(e * h * f * 2), pre(m * fc1 * 2), d_pre(m * fc1 * 2),
      scaled_act(m * f * 2), p(m * 4), dp(m * 4), off = upload(offsets);
  DeviceBuffer partial_bf16(m * fc2_dgrad_dp_blocks(f) * 4),
      partial_fp8(m * fc2_dgrad_fp8_dp_blocks(f) * 4);
  DeviceBuffer dys8(m * h), dys_scales_rows(m * hg * 4), dys_scales(hg * scale_rows * 4),
      w2_8(e * h * f), w2_scales(e * hg * fg * 4), w2t(e * f * h), w2t_scales(e * fg * hg * 4);
  fill_uniform_bf16(dys.get(), m * h, -1, 1, 0x5eedc1, nullptr);
  const float w_range = 1.0f / std::sqrt(static_cast<float>(f));
  fill_uniform_bf16(w2.get(), e * h * f, -w_range, w_range, 0x5eedc2, nullptr);
  fill_uniform_bf16(pre.get(), m * fc1, -2, 2, 0x5eedc3, nullptr);
  fill_uniform_fp32(p.get(), m, 0.0f, 1.0f, 0x5eedc4, nullptr);
  auto quantize_dys = [&](cudaStream_t s) {
    layer::quantize_rows_fp8(dys.view(DType::kBFloat16, {m, h}),
                             dys8.view(DType::kFloat8E4M3, {m, h}),
                             dys_scales_rows.view(DType::kFloat32, {m, hg}),
                             dys_scales.view(DType::kFloat32, {hg, scale_rows}), s);
  };
  quantize_dys(nullptr);
  quantize_fp8_blockwise_128x128(w2.view(DType::kBFloat16, {e, h, f}),
                                 w2_8.view(DType::kFloat8E4M3, {e, h, f}),
                                 w2_scales.view(DType::kFloat32, {e, hg, fg}), nullptr);
  transpose_fp8_blockwise_weights(w2_8.view(DType::kFloat8E4M3, {e, h, f}),
                                  w2_scales.view(DType::kFloat32, {e, hg, fg}),
                                  w2t.view(DType::kFloat8E4M3, {e, f, h}),
                                  w2t_scales.view(DType::kFloat32, {e, fg, hg}), nullptr);
  MOEFUSE_CUDA_CHECK(cudaDeviceSynchronize());
  // The epilogue's tensors, the same for both kernels' argument structs.
  auto epilogue_views = [&](auto& args) {
    args.offsets = off.view(DType::kInt32, {e + 1});
    args.pre = pre.view(DType::kBFloat16, {m, fc1});
    args.d_pre = d_pre.view(DType::kBFloat16, {m, fc1});
    args.activation = c.activation;
    args.clamped_swiglu = c.clamped_swiglu;
    args.row_scale = p.view(DType::kFloat32, {m});
    args.scaled_act = scaled_act.view(DType::kBFloat16, {m, f});
    args.d_row_scale = dp.view(DType::kFloat32, {m});
  };
  Fc2DgradArgs bf16_args{.dys = dys.view(DType::kBFloat16, {m, h}),
                         .w2 = w2.view(DType::kBFloat16, {e, h, f})};
  epilogue_views(bf16_args);
  const Fc2DgradScratch bf16_scratch{
      .dp_partial = partial_bf16.view(DType::kFloat32, {m, fc2_dgrad_dp_blocks(f)})};
  Fc2DgradFp8Args fp8_args{.dys = dys8.view(DType::kFloat8E4M3, {m, h}),
                           .dys_scales = dys_scales.view(DType::kFloat32, {hg, scale_rows}),
                           .w2t = w2t.view(DType::kFloat8E4M3, {e, f, h}),
                           .w2t_scales = w2t_scales.view(DType::kFloat32, {e, fg, hg})};
  epilogue_views(fp8_args);
  const TensorView fp8_partial =
      partial_fp8.view(DType::kFloat32, {m, fc2_dgrad_fp8_dp_blocks(f)});
  report_fp8_twins(
      name, "fc2 dgrad", 2.0 * m * h * f,
      {.bf16 = [&](cudaStream_t s) { grouped_gemm_fc2_dgrad(bf16_args, bf16_scratch, s); },
       .fp8 = [&](cudaStream_t s) { grouped_gemm_fc2_dgrad_fp8(fp8_args, fp8_partial, s); },
       .quantise = quantize_dys},
      {"moefuse bf16 fc2 dgrad + dGLU + dp", "moefuse fp8 fc2 dgrad + dGLU + dp",
       "moefuse fp8 dys quantise + fc2 dgrad"},
      o, report);
}

std::vector<int32_t> equal_groups(int groups, int32_t rows) {
  std::vector<int32_t> offsets(groups + 1);
  for (int g = 0; g <= groups; ++g) offsets[g] = g * rows;
  return offsets;
}

int run(Args& args) {
  const GemmBenchOptions o = parse_gemm_bench_options(args);
  if (gpu_missing("gemm-fp8")) return 0;
  std::vector<Problem> problems;
  std::vector<std::pair<std::string, std::vector<int32_t>>> preset_offsets;
  // DeepGEMM's grouped (contiguous layout) shapes: groups × M, N, K.
  for (auto [groups, rows, n, k] : std::vector<std::array<int, 4>>{
           {4, 8192, 4096, 7168}, {4, 8192, 7168, 2048}, {8, 4096, 4096, 7168},
           {8, 4096, 7168, 2048}}) {
    problems.push_back({.name = "deepgemm " + std::to_string(groups) + "x" + std::to_string(rows),
                        .op = std::to_string(n) + "x" + std::to_string(k),
                        .offsets = equal_groups(groups, rows), .n = n, .k = k});
  }
  for (const auto& name : o.presets) {
    const MoeConfig c = preset(name);
    const SyntheticRouting r = draw_routing(o.tokens, c.num_experts, c.top_k, o.routing,
                                            0x5eed0000 + std::hash<std::string>{}(name));
    preset_offsets.emplace_back(name, r.offsets);
    problems.push_back({.name = name, .op = "fc1", .offsets = r.offsets, .n = c.fc1_width(),
                        .k = c.hidden, .activation = true, .act = c.activation});
    problems.push_back({.name = name, .op = "fc2", .offsets = r.offsets, .n = c.hidden,
                        .k = c.ffn, .row_scale = true});
  }
  Report report("FP8 grouped GEMM (e4m3; DeepSeek 1x128 / 128x128 fp32 scales, MXFP8 1x32 "
                "e8m0 emulated in bf16; bf16 out)",
                {"problem", "op", "variant", "median_ms", "TFLOP/s", "vs_dense_bf16",
                 "vs_bf16_grouped", "vs_torch_fp8_grouped"});
  report.set_meta("tokens", static_cast<long long>(o.tokens));
  report.set_meta("routing", o.routing_name);
  report.set_meta("timing", timing_note(o.warmup, o.iters, o.warm_ms));
  report.set_meta("columns",
                  "vs_* = that variant's time / this time (the same FLOPs); vs_torch_fp8_grouped: "
                  "torch._scaled_grouped_mm's (row-wise scales)");
  Report mx_report("MXFP8 emulation: dequantise passes vs the BF16 grouped GEMM",
                   {"problem", "op", "dequantise_ms", "TB/s", "mxfp8_ms", "bf16_grouped_ms",
                    "mxfp8_vs_bf16"});
  mx_report.set_meta("columns",
                     "dequantise_ms: both passes alone, TB/s over the bytes they move (e4m3 and "
                     "e8m0 read, bf16 written); mxfp8_vs_bf16 = mxfp8_ms / bf16_grouped_ms");
  // One torch process per set of expert rows, timing every problem that has them.
  std::map<std::vector<int32_t>, TorchGemmTimings> torch_runs;
  auto torch_for = [&](const Problem& p) -> const TorchGemmTimings& {
    if (auto it = torch_runs.find(p.offsets); it != torch_runs.end()) return it->second;
    std::vector<int32_t> counts;
    for (size_t i = 1; i < p.offsets.size(); ++i) counts.push_back(p.offsets[i] - p.offsets[i - 1]);
    std::string specs;
    for (const Problem& q : problems)
      if (q.offsets == p.offsets)
        specs += " --problem " + q.op + ":" + std::to_string(q.n) + ":" + std::to_string(q.k);
    progress("gemm-fp8 " + p.name + ": torch");
    const TorchGemmTimings& t =
        torch_runs.emplace(p.offsets, run_torch_gemm("bench/torch_gemm_fp8.py", counts, specs, o))
            .first->second;
    if (!t.ms)
      std::printf("   torch (%s): unavailable, %s\n", p.name.c_str(), t.unavailable.c_str());
    return t;
  };
  CublasBaseline cublas;
  for (const Problem& p : problems) bench_problem(p, o, torch_for(p), cublas, report, mx_report);
  Report wgrad("FP8 k-grouped wgrad (column-wise e4m3, 128-row groups, fp32 out)",
               {"problem", "op", "variant", "median_ms", "TFLOP/s", "vs_bf16_wgrad"});
  wgrad.set_meta("columns", "vs_bf16_wgrad = the BF16 wgrad's time / this time");
  for (const auto& [name, offsets] : preset_offsets)
    bench_wgrad(name, preset(name), offsets, o, wgrad);
  Report dgrad("FP8 FC2 dgrad with the dGLU + dp epilogue (1x128 dys, 128x128 W2ᵀ; bf16 out)",
               {"problem", "op", "variant", "median_ms", "TFLOP/s", "vs_bf16_dgrad"});
  dgrad.set_meta("columns", "vs_bf16_dgrad = the BF16 fused FC2 dgrad's time / this time");
  for (const auto& [name, offsets] : preset_offsets)
    bench_fc2_dgrad(name, preset(name), offsets, o, dgrad);
  report.print();
  mx_report.print();
  wgrad.print();
  dgrad.print();
  std::printf("reproduce: %s\n", args.command().c_str());
  if (!o.json.empty())
    write_json_file(o.json, args.command(), {&report, &mx_report, &wgrad, &dgrad});
  return 0;
}

}  // namespace

MOEFUSE_BENCH_MODE(gemm_fp8, "gemm-fp8",
                   "FP8 grouped GEMM (DeepSeek-V3 and MXFP8 recipes) vs BF16 grouped, cuBLAS "
                   "dense bf16 and torch's FP8 GEMMs",
                   kGemmBenchOptions, run);

}  // namespace moefuse::bench
