// The MXFP8 layer (config.precision kMXFP8: the bf16 kernels on operands quantise-dequantised
// along each GEMM's K, ref/layer_mxfp8.h) on the GPU, on fresh random inputs, every preset's kind
// of layer scaled down (gpt-oss with its expert bias, deepseek with its shared expert):
// - prepare_fp8_weights: the four bf16 copies in the weight region equal ref::qdq_mxfp8_rows /
//   _cols of the interleaved w1 and of w2, rounded to bf16, bit for bit, per tensor;
// - y against ref::layer_forward_mxfp8 (the same quantised operands, fp64 sums: only bf16
//   roundings and summation order differ; where they move an act value across an E4M3 rounding
//   boundary its code moves a step, hence the FP8 test's bounds) and against the bf16 reference
//   within the recipe's measured quantisation error (ref/layer_fp8_tolerance.h);
// - every gradient against ref::layer_backward_mxfp8 (the bf16 tolerance of layer_step.h) and
//   against the bf16 reference step within the measured quantisation error;
// - FC1's pre-activation cached and recomputed (recompute_pre), config.bf16_wgrad;
// - experts without tokens (T < E, top-1), T = 1, H and F not multiples of 64;
// - prepare + forward + backward captured as one CUDA graph, replayed on new inputs, equal to
//   eager steps bit for bit.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "cuda/check.h"
#include "cuda/layer/plan.h"
#include "gpu/layer_lowp_checks.h"
#include "gpu/layer_test_fixture.h"
#include "moefuse/health.h"
#include "ref/bf16_bits.h"
#include "ref/layer_fp8_tolerance.h"
#include "ref/layer_mxfp8.h"
#include "ref/quant.h"

namespace moefuse {
namespace {

using test::expect_gradients;
using test::expect_y;
using test::RefInputs;

MoeConfig mxfp8_preset(const std::string& name) {
  MoeConfig c = test::scaled_preset(name);
  c.precision = PrecisionRecipe::kMXFP8;
  return c;
}

// As the FP8 test's: a few routed rows make one moved code a visible share of y.
double reference_tolerance(int64_t routed_rows) { return routed_rows < 64 ? 3e-2 : 1e-2; }

// One weight [E, N, K] (fp32 host values) quantise-dequantised as prepare_fp8_weights does:
// along K (rows) or down each expert's N rows (cols), as bf16 bits.
std::vector<uint16_t> qdq_weight(std::vector<float> w, int64_t e, int64_t n, int64_t k,
                                 bool along_rows) {
  std::vector<float> out(w.size());
  const TensorView in = TensorView::contiguous(w.data(), DType::kFloat32, {e * n, k});
  const TensorView o = TensorView::contiguous(out.data(), DType::kFloat32, {e * n, k});
  if (along_rows) ref::qdq_mxfp8_rows(in, o);
  else ref::qdq_mxfp8_cols(in, TensorView{}, o);
  std::vector<uint16_t> bits(out.size());
  for (size_t i = 0; i < out.size(); ++i) bits[i] = ref::bf16_bits(out[i]);
  return bits;
}

void expect_mxfp8_weights(const test::DeviceLayer& d, const test::LayerData& data) {
  const MoeConfig& c = d.c;
  const int64_t E = c.num_experts, H = c.hidden, F = c.ffn, fc1 = c.fc1_width();
  const layer::Plan p = layer::make_plan(c, {}, 1);
  const std::vector<float> w1 = test::interleaved(c, data.w1, E, fc1, H);
  struct Copy {
    const char* name;
    const layer::Slice& slice;
    std::vector<uint16_t> want;
  };
  for (const Copy& copy :
       {Copy{"w1 along H", p.w1_qdq, qdq_weight(w1, E, fc1, H, true)},
        Copy{"w2 along F", p.w2_qdq, qdq_weight(data.w2, E, H, F, true)},
        Copy{"w1 along fc1", p.w1_qdq_dgrad, qdq_weight(w1, E, fc1, H, false)},
        Copy{"w2 along H", p.w2_qdq_dgrad, qdq_weight(data.w2, E, H, F, false)}}) {
    std::vector<uint16_t> got = test::download_slice<uint16_t>(d, copy.slice);
    got.resize(copy.want.size());  // the slice is rounded up to 256 bytes
    test::expect_same(got, copy.want, std::string("qdq ") + copy.name);
  }
}

double bf16_tolerance(const std::string& name) { return test::tolerance(name); }

double mxfp8_vs_bf16_tolerance(const std::string& name) {
  return name.rfind("d_shared", 0) == 0 ? test::tolerance(name)
                                         : ref::mxfp8_layer_gradient_tolerance(name);
}

// y and every gradient of `got` against the MXFP8 reference and the bf16 one. router_vs_bf16
// false for a handful of tokens (the FP8 test's reason: d_w_router's error does not average).
void expect_step_matches(const MoeConfig& c, int64_t T, const test::LayerData& data,
                         const test::StepResult& got, const std::string& what,
                         bool router_vs_bf16 = true) {
  const test::StepResult bf16 = test::reference_step(data);
  RefInputs in(data);
  const ref::LayerForward fwd = ref::layer_forward(c, in.w, in.x);
  expect_y(got.at("y"), ref::layer_forward_mxfp8(c, in.w, in.x, fwd), c.hidden,
           reference_tolerance(T * c.top_k), "mxfp8 " + what + " vs the MXFP8 reference");
  expect_y(got.at("y"), bf16.at("y"), c.hidden, ref::kMxfp8LayerForwardTolerance,
           "mxfp8 " + what + " vs the bf16 reference");
  test::StepResult losses = bf16;
  std::erase_if(losses.tensors, [](const auto& t) { return t.first != "losses"; });
  test::expect_matches(got, losses);  // the router is bf16: its losses are the reference's
  expect_gradients(c, T, got, test::reference_step(data, &ref::layer_backward_mxfp8),
                   &bf16_tolerance, "mxfp8 " + what + " vs the MXFP8 reference");
  test::StepResult bf16_grads = bf16;
  if (!router_vs_bf16)
    std::erase_if(bf16_grads.tensors, [](const auto& t) { return t.first == "d_w_router"; });
  expect_gradients(c, T, got, bf16_grads, &mxfp8_vs_bf16_tolerance,
                   "mxfp8 " + what + " vs the bf16 reference");
}

// One MXFP8 step, eager, outputs and workspace poisoned: prepare, forward, backward.
void check_step(const MoeConfig& c, int64_t T, const std::string& what,
                bool router_vs_bf16 = true, bool recompute = false) {
  SCOPED_TRACE(what + " T=" + std::to_string(T) + (recompute ? " recompute_pre" : " cached pre") +
               " seed=" + std::to_string(test::seed()));
  test::Stream stream;
  const LayerOptions o{.mode = LayerMode::kFused, .recompute_pre = recompute};
  MoeLayer layer(c, o);
  test::DeviceLayer d(c, o, T);
  const test::LayerData data = test::LayerData::random(c, T);
  d.upload(data);
  EXPECT_EQ(test::run_poisoned_step(layer, d, stream), 0);  // prepare, forward, backward
  expect_mxfp8_weights(d, data);
  expect_step_matches(c, T, data, test::download(d), what, router_vs_bf16);
}

struct Case {
  std::string name;
  MoeConfig config;
};

std::vector<Case> cases() {
  std::vector<Case> out = {{"qwen3", mxfp8_preset("qwen3-30b-a3b")},
                           {"gptoss", mxfp8_preset("gpt-oss-120b")},
                           {"mixtral", mxfp8_preset("mixtral-8x7b")},
                           {"deepseek", mxfp8_preset("deepseek-v3")}};
  for (Activation a : {Activation::kGeGLU, Activation::kSquaredReLU}) {
    MoeConfig c = mxfp8_preset("qwen3-30b-a3b");
    c.activation = a;
    out.push_back({std::string(activation_name(a)), c});
  }
  // H and F multiples of 32 but not of 64: partial GEMM tiles along every K and N.
  MoeConfig odd = mxfp8_preset("qwen3-30b-a3b");
  odd.hidden = 352, odd.ffn = 224;
  out.push_back({"h352_f224", odd});
  for (auto [name, preset] : {std::pair{"qwen3_bf16_wgrad", "qwen3-30b-a3b"},
                              std::pair{"gptoss_bf16_wgrad", "gpt-oss-120b"}}) {
    MoeConfig c = mxfp8_preset(preset);
    c.bf16_wgrad = true;
    out.push_back({name, c});
  }
  return out;
}

class LayerMxfp8 : public ::testing::TestWithParam<Case> {};

TEST_P(LayerMxfp8, ForwardAndBackwardMatchMxfp8AndBf16References) {
  MOEFUSE_REQUIRE_HOPPER();
  check_step(GetParam().config, 200, GetParam().name);
}

TEST_P(LayerMxfp8, ForwardAndBackwardWithRecomputePre) {
  MOEFUSE_REQUIRE_HOPPER();
  check_step(GetParam().config, 200, GetParam().name, true, /*recompute=*/true);
}

INSTANTIATE_TEST_SUITE_P(Layer, LayerMxfp8, ::testing::ValuesIn(cases()),
                         [](const auto& info) { return info.param.name; });

// Top-1 over 16 experts with 5 tokens: at least 11 experts without rows (their d_w1 / d_w2 must
// come back 0, not poison; no column-wise block); one token (one short block per expert).
TEST(LayerMxfp8Edges, ExpertsWithoutTokensAndOneToken) {
  MOEFUSE_REQUIRE_HOPPER();
  MoeConfig c = mxfp8_preset("qwen3-30b-a3b");
  c.top_k = 1;
  check_step(c, 5, "top1_empty_experts");
  check_step(mxfp8_preset("deepseek-v3"), 1, "deepseek_one_token", /*router_vs_bf16=*/false);
}

// prepare + forward + backward as ONE CUDA graph, replayed on new inputs in the same buffers:
// each replay matches the references and equals an eager step bit for bit.
TEST(LayerMxfp8Graph, PrepareForwardBackwardCaptureOnceReplayOnNewInputs) {
  MOEFUSE_REQUIRE_HOPPER();
  const MoeConfig c = mxfp8_preset("gpt-oss-120b");
  const int64_t T = 200;
  test::expect_graph_replays(c, T, [&](const test::LayerData& data,
                                       const test::StepResult& graphed) {
    expect_step_matches(c, T, data, graphed, "graph replay");
  });
}

}  // namespace
}  // namespace moefuse
