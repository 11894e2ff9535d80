// moefuse-bench reference: the CPU reference layer (src/ref), forward and backward, on a small
// layer with fresh random weights and inputs. The default mode until the GPU layer lands: it
// shows the oracle's numbers and its CPU wall time, and says plainly that no GPU kernel runs.
#include <chrono>
#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "bench/mode.h"
#include "bench/report.h"
#include "cuda/device.h"
#include "moefuse/config.h"
#include "ref/layer.h"

namespace moefuse::bench {
namespace {

std::vector<float> normal(std::mt19937_64& gen, int64_t n, double stddev) {
  std::normal_distribution<float> dist(0.0f, static_cast<float>(stddev));
  std::vector<float> v(n);
  for (auto& x : v) x = dist(gen);
  return v;
}

double norm(const std::vector<float>& v) {
  double s = 0;
  for (float x : v) s += static_cast<double>(x) * x;
  return std::sqrt(s);
}

TensorView view(std::vector<float>& v, std::initializer_list<int64_t> shape) {
  return v.empty() ? TensorView{} : TensorView::contiguous(v.data(), DType::kFloat32, shape);
}

double ms_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
}

// The preset's activation, router, bias and shared expert at the scaled-down sizes.
MoeConfig scaled_config(Args& args, const std::string& preset_name) {
  MoeConfig c = preset(preset_name);
  const bool shared = c.shared_expert_ffn > 0;
  c.hidden = args.get_int("hidden", 256, 1, 1 << 14);
  c.ffn = args.get_int("ffn", 96, 1, 1 << 14);
  c.num_experts = args.get_int("experts", 16, 1, 1024);
  c.top_k = args.get_int("topk", 4, 1, 1024);
  c.shared_expert_ffn = shared ? c.ffn : 0;
  // The presets leave the loss coefficients at 0; typical training values make the losses visible.
  if (c.router.aux_loss_coeff == 0) c.router.aux_loss_coeff = 0.01f;
  if (c.router.z_loss_coeff == 0) c.router.z_loss_coeff = 0.001f;
  c.validate();
  return c;
}

int run_reference(Args& args) {
  const std::string preset_name = args.get("preset", "qwen3-30b-a3b");
  const MoeConfig c = scaled_config(args, preset_name);
  const int64_t T = args.get_int("tokens", 128, 0, 1 << 16);
  const std::string json = args.get("json", "");
  args.finish();
  const int64_t E = c.num_experts, H = c.hidden, F = c.ffn, fc1 = c.fc1_width();
  const int64_t sF = c.shared_expert_ffn, sfc1 = is_glu(c.activation) ? 2 * sF : sF;

  const uint64_t seed = std::random_device{}();
  std::mt19937_64 gen(seed);
  const double h = 1.0 / std::sqrt(static_cast<double>(H));
  std::vector<float> x = normal(gen, T * H, 1.0), dy = normal(gen, T * H, 1.0);
  std::vector<float> w_router = normal(gen, E * H, h), w1 = normal(gen, E * fc1 * H, h),
                     w2 = normal(gen, E * H * F, 1.0 / std::sqrt(static_cast<double>(F)));
  std::vector<float> bias, b1, b2, sw1, sw2;
  if (c.router.use_score_bias) bias = normal(gen, E, 0.01);
  if (c.expert_bias) b1 = normal(gen, E * fc1, 0.1), b2 = normal(gen, E * H, 0.1);
  if (sF) sw1 = normal(gen, sfc1 * H, h), sw2 = normal(gen, H * sF, 1.0 / std::sqrt(double(sF)));
  const ref::LayerWeights weights{
      .w_router = view(w_router, {E, H}),
      .score_bias = view(bias, {E}),
      .experts = {.w1 = view(w1, {E, fc1, H}), .b1 = view(b1, {E, fc1}),
                  .w2 = view(w2, {E, H, F}), .b2 = view(b2, {E, H})},
      .shared_w1 = view(sw1, {sfc1, H}),
      .shared_w2 = view(sw2, {H, sF})};
  std::vector<float> dx(T * H), dwr(E * H), dw1(w1.size()), db1(b1.size()), dw2(w2.size()),
      db2(b2.size()), dsw1(sw1.size()), dsw2(sw2.size());
  const ref::LayerGrads grads{
      .dx = TensorView::contiguous(dx.data(), DType::kFloat32, {T, H}),
      .d_w_router = view(dwr, {E, H}),
      .experts = {.w1 = view(dw1, {E, fc1, H}), .b1 = view(db1, {E, fc1}),
                  .w2 = view(dw2, {E, H, F}), .b2 = view(db2, {E, H})},
      .d_shared_w1 = view(dsw1, {sfc1, H}),
      .d_shared_w2 = view(dsw2, {H, sF})};
  const TensorView xv = TensorView::contiguous(x.data(), DType::kFloat32, {T, H});

  auto start = std::chrono::steady_clock::now();
  const ref::LayerForward f = ref::layer_forward(c, weights, xv);
  const double forward_ms = ms_since(start);
  start = std::chrono::steady_clock::now();
  ref::layer_backward(c, weights, xv, f,
                      TensorView::contiguous(dy.data(), DType::kFloat32, {T, H}), grads);
  const double backward_ms = ms_since(start);

  std::printf("moefuse-bench reference: CPU reference (fp64 accumulation; no GPU kernels involved)\n");
  std::string why;
  if (cuda::hopper_available(&why)) {
    std::printf("GPU: an sm_90 device is present; the GPU layer benchmark comes with a later issue.\n");
  } else {
    std::printf("GPU: none usable (%s); the GPU layer benchmark comes with a later issue.\n",
                why.c_str());
  }
  Report setup("reference layer: config", {"item", "value"});
  setup.add_row({std::string("preset (activation, router)"), preset_name});
  setup.add_row({std::string("T, H, F, E, k"),
                 std::to_string(T) + ", " + std::to_string(H) + ", " + std::to_string(F) + ", " +
                     std::to_string(E) + ", " + std::to_string(c.top_k)});
  setup.add_row({std::string("activation"), std::string(activation_name(c.activation))});
  setup.add_row({std::string("router"), std::string(router_kind_name(c.router.kind)) +
                                            (c.router.renormalize ? ", renormalised" : "") +
                                            (c.router.use_score_bias ? ", score bias" : "")});
  setup.add_row({std::string("expert bias / shared F"),
                 std::string(c.expert_bias ? "yes" : "no") + " / " + std::to_string(sF)});
  setup.add_row({std::string("aux / z coefficients"),
                 std::to_string(c.router.aux_loss_coeff) + " / " +
                     std::to_string(c.router.z_loss_coeff)});
  setup.add_row({std::string("seed"), static_cast<long long>(seed)});

  Report tokens("reference layer: tokens per expert", {"expert", "tokens"});
  for (int64_t e = 0; e < E; ++e)
    tokens.add_row({static_cast<long long>(e), static_cast<long long>(f.counts[e])});

  Report result("reference layer: results (CPU)", {"quantity", "value"});
  result.add_row({std::string("aux loss"), f.aux_loss});
  result.add_row({std::string("z loss"), f.z_loss});
  result.add_row({std::string("|y|"), norm(f.y)});
  result.add_row({std::string("|dx|"), norm(dx)});
  result.add_row({std::string("|d_w_router|"), norm(dwr)});
  result.add_row({std::string("|d_w1|"), norm(dw1)});
  result.add_row({std::string("|d_w2|"), norm(dw2)});
  if (c.expert_bias) {
    result.add_row({std::string("|d_b1|"), norm(db1)});
    result.add_row({std::string("|d_b2|"), norm(db2)});
  }
  if (sF) {
    result.add_row({std::string("|d_shared_w1|"), norm(dsw1)});
    result.add_row({std::string("|d_shared_w2|"), norm(dsw2)});
  }
  result.add_row({std::string("forward wall ms (CPU, one run)"), forward_ms});
  result.add_row({std::string("backward wall ms (CPU, one run)"), backward_ms});
  for (const Report* r : {&setup, &tokens, &result}) r->print();
  if (!json.empty()) write_json_file(json, args.command(), {&setup, &tokens, &result});
  return 0;
}

}  // namespace

MOEFUSE_BENCH_MODE(reference, "reference",
                   "CPU reference layer forward+backward (fp64 accumulation, no GPU kernels)",
                   "[--preset NAME] [--hidden 256 --ffn 96 --experts 16 --topk 4] "
                   "[--tokens 128] [--json FILE]",
                   run_reference);

}  // namespace moefuse::bench
