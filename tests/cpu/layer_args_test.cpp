// Bad inputs of the GPU layer, caught on the host before any CUDA call (so these run without a
// GPU): every argument of forward and backward, the config, and the GLU (de)interleave helper.
#include <gtest/gtest.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "cuda/layer/layer_args.h"
#include "moefuse/error.h"
#include "moefuse/grouped_gemm.h"
#include "moefuse/layer.h"
#include "ref_test_helpers.h"

namespace moefuse {
namespace {

using test::expect_invalid;

// Well-formed device views at fake, distinct, 256-byte aligned addresses: validation reads only
// the view, never the memory.
struct FakeLayer {
  MoeConfig c;
  LayerOptions o;
  int64_t T = 32;
  uintptr_t next = uintptr_t{1} << 32;
  MoeLayerWeights w;
  MoeLayerGrads g;
  MoeLayerOutputs out;
  TensorView x, dy, health;
  Workspace cache, workspace;

  TensorView dev(DType dtype, std::initializer_list<int64_t> shape) {
    next += uintptr_t{1} << 40;  // beyond the largest view: validation rejects overlaps
    return TensorView::contiguous(reinterpret_cast<void*>(next), dtype, shape, Device::kCuda);
  }

  explicit FakeLayer(const MoeConfig& config) : c(config) {
    const int64_t E = c.num_experts, H = c.hidden, F = c.ffn, fc1 = c.fc1_width();
    MoeConfig sc = c;
    sc.ffn = c.shared_expert_ffn;
    const bool shared = c.shared_expert_ffn > 0, bias = c.expert_bias;
    const DType bf = DType::kBFloat16, f32 = DType::kFloat32;
    x = dev(bf, {T, H});
    dy = dev(bf, {T, H});
    health = dev(DType::kInt32, {1});
    w = {.w_router = dev(bf, {E, H}),
         .score_bias = c.router.use_score_bias ? dev(f32, {E}) : TensorView{},
         .w1 = dev(bf, {E, fc1, H}),
         .b1 = bias ? dev(f32, {E, fc1}) : TensorView{},
         .w2 = dev(bf, {E, H, F}),
         .b2 = bias ? dev(f32, {E, H}) : TensorView{},
         .shared_w1 = shared ? dev(bf, {sc.fc1_width(), H}) : TensorView{},
         .shared_w2 = shared ? dev(bf, {H, sc.ffn}) : TensorView{}};
    g = {.dx = dev(bf, {T, H}),
         .d_w_router = dev(f32, {E, H}),
         .d_w1 = dev(f32, {E, fc1, H}),
         .d_b1 = bias ? dev(f32, {E, fc1}) : TensorView{},
         .d_w2 = dev(f32, {E, H, F}),
         .d_b2 = bias ? dev(f32, {E, H}) : TensorView{},
         .d_shared_w1 = shared ? dev(f32, {sc.fc1_width(), H}) : TensorView{},
         .d_shared_w2 = shared ? dev(f32, {H, sc.ffn}) : TensorView{}};
    out = {.y = dev(bf, {T, H}), .losses = dev(f32, {2})};
    const LayerMemoryPlan plan = layer_memory_plan(c, o, T);
    cache = {.data = dev(bf, {1}).data, .bytes = plan.cache_bytes};
    workspace = {.data = dev(bf, {1}).data, .bytes = plan.workspace_bytes};
  }

  void forward() const {
    layer::check_layer_forward(c, o, x, w, out, cache, workspace, health);
  }
  void backward() const {
    layer::check_layer_backward(c, o, x, dy, w, g, cache, workspace, health);
  }
};

// Each preset's well-formed arguments pass.
TEST(LayerArgs, WellFormedArgumentsPass) {
  for (auto name : preset_names()) {
    SCOPED_TRACE(std::string(name));
    FakeLayer f(preset(name));
    EXPECT_NO_THROW(f.forward());
    EXPECT_NO_THROW(f.backward());
    f.g.loss_grads = f.dev(DType::kFloat32, {2});  // the losses' upstream gradient, optional
    EXPECT_NO_THROW(f.backward());
    f.g.accumulate = true;  // fp32 expert gradients (FakeLayer's) accumulate
    EXPECT_NO_THROW(f.backward());
  }
}

// One mutation of a well-formed FakeLayer and the argument name it must be rejected with.
struct Mutation {
  const char* preset;
  std::string argument;
  std::function<void(FakeLayer&)> mutate;
  bool forward = true, backward = true;
};

TEST(LayerArgs, EveryBadArgumentIsNamed) {
  const DType bf = DType::kBFloat16, f32 = DType::kFloat32;
  const std::vector<Mutation> mutations = {
      {"qwen3-30b-a3b", "x", [&](FakeLayer& f) { f.x = f.dev(f32, {f.T, 2048}); }},
      {"qwen3-30b-a3b", "x", [&](FakeLayer& f) { f.x = f.dev(bf, {f.T, 1024}); }},
      {"qwen3-30b-a3b", "x", [&](FakeLayer& f) { f.x = f.dev(bf, {0, 2048}); }},
      {"qwen3-30b-a3b", "x",
       [&](FakeLayer& f) { f.x.data = static_cast<char*>(f.x.data) + 2; }},
      {"qwen3-30b-a3b", "weights.w_router", [&](FakeLayer& f) { f.w.w_router = f.dev(bf, {64, 2048}); }},
      {"qwen3-30b-a3b", "weights.score_bias", [&](FakeLayer& f) { f.w.score_bias = f.dev(f32, {128}); }},
      {"deepseek-v3", "weights.score_bias", [&](FakeLayer& f) { f.w.score_bias = {}; }},
      {"qwen3-30b-a3b", "weights.w1", [&](FakeLayer& f) { f.w.w1 = f.dev(bf, {128, 768, 2048}); }},
      {"qwen3-30b-a3b", "weights.w2", [&](FakeLayer& f) { f.w.w2 = f.dev(f32, {128, 2048, 768}); }},
      {"gpt-oss-120b", "weights.b1", [&](FakeLayer& f) { f.w.b1 = {}; }},
      {"qwen3-30b-a3b", "weights.b2", [&](FakeLayer& f) { f.w.b2 = f.dev(f32, {128, 2048}); }},
      {"deepseek-v3", "weights.shared_w1", [&](FakeLayer& f) { f.w.shared_w1 = {}; }},
      {"qwen3-30b-a3b", "weights.shared_w2", [&](FakeLayer& f) { f.w.shared_w2 = f.dev(bf, {2048, 8}); }},
      {"qwen3-30b-a3b", "out.y", [&](FakeLayer& f) { f.out.y = f.dev(bf, {f.T + 1, 2048}); }, true, false},
      {"qwen3-30b-a3b", "out.losses", [&](FakeLayer& f) { f.out.losses = f.dev(f32, {3}); }, true, false},
      {"qwen3-30b-a3b", "cache", [&](FakeLayer& f) { f.cache.bytes -= 1; }},
      {"qwen3-30b-a3b", "cache",
       [&](FakeLayer& f) { f.cache.data = static_cast<char*>(f.cache.data) + 16; }},
      {"qwen3-30b-a3b", "workspace", [&](FakeLayer& f) { f.workspace.bytes /= 2; }},
      {"qwen3-30b-a3b", "health", [&](FakeLayer& f) { f.health = f.dev(f32, {1}); }},
      {"qwen3-30b-a3b", "dy", [&](FakeLayer& f) { f.dy = f.dev(bf, {f.T, 16}); }, false, true},
      // Outputs aliasing another argument (hostile input, docs/RELIABILITY.md).
      {"qwen3-30b-a3b", "out.y", [&](FakeLayer& f) { f.out.y.data = f.x.data; }, true, false},
      {"qwen3-30b-a3b", "out.losses",
       [&](FakeLayer& f) { f.out.losses.data = static_cast<char*>(f.w.w1.data) + 256; }, true, false},
      {"qwen3-30b-a3b", "cache", [&](FakeLayer& f) { f.cache.data = f.x.data; }, true, false},
      {"qwen3-30b-a3b", "workspace", [&](FakeLayer& f) { f.workspace.data = f.w.w_router.data; }},
      {"qwen3-30b-a3b", "workspace", [&](FakeLayer& f) { f.workspace.data = f.cache.data; },
       false, true},
      {"qwen3-30b-a3b", "health", [&](FakeLayer& f) { f.health.data = f.w.w2.data; }},
      {"qwen3-30b-a3b", "grads.dx", [&](FakeLayer& f) { f.g.dx.data = f.dy.data; }, false, true},
      {"qwen3-30b-a3b", "grads.d_w1", [&](FakeLayer& f) { f.g.d_w1.data = f.w.w1.data; }, false, true},
      {"qwen3-30b-a3b", "grads.d_w1", [&](FakeLayer& f) { f.g.d_w2.data = f.g.d_w1.data; }, false, true},
      {"deepseek-v3", "grads.d_shared_w2",
       [&](FakeLayer& f) { f.g.d_shared_w2.data = f.cache.data; }, false, true},
      {"qwen3-30b-a3b", "grads.dx", [&](FakeLayer& f) { f.g.dx = f.dev(f32, {f.T, 2048}); }, false, true},
      {"qwen3-30b-a3b", "grads.d_w_router",
       [&](FakeLayer& f) { f.g.d_w_router = f.dev(bf, {128, 2048}); }, false, true},
      {"qwen3-30b-a3b", "grads.d_w1", [&](FakeLayer& f) { f.g.d_w1 = f.dev(f32, {128, 768, 2048}); },
       false, true},
      {"qwen3-30b-a3b", "grads.d_w2", [&](FakeLayer& f) { f.g.d_w2 = f.dev(f32, {128, 768, 2048}); },
       false, true},
      {"qwen3-30b-a3b", "grads.d_w1",
       [&](FakeLayer& f) { f.g.d_w1 = f.dev(DType::kInt32, {128, 1536, 2048}); }, false, true},
      {"qwen3-30b-a3b", "grads.d_w2", [&](FakeLayer& f) { f.g.d_w2 = f.dev(bf, {128, 2048, 767}); },
       false, true},
      {"gpt-oss-120b", "grads.d_b1", [&](FakeLayer& f) { f.g.d_b1 = {}; }, false, true},
      {"qwen3-30b-a3b", "grads.d_b2", [&](FakeLayer& f) { f.g.d_b2 = f.dev(f32, {128, 2048}); },
       false, true},
      {"deepseek-v3", "grads.d_shared_w1", [&](FakeLayer& f) { f.g.d_shared_w1 = {}; }, false, true},
      {"qwen3-30b-a3b", "grads.d_shared_w2",
       [&](FakeLayer& f) { f.g.d_shared_w2 = f.dev(f32, {2048, 8}); }, false, true},
      // The losses' upstream gradient: [2] fp32, and an input no gradient may overwrite.
      {"qwen3-30b-a3b", "grads.loss_grads", [&](FakeLayer& f) { f.g.loss_grads = f.dev(f32, {3}); },
       false, true},
      {"qwen3-30b-a3b", "grads.loss_grads", [&](FakeLayer& f) { f.g.loss_grads = f.dev(bf, {2}); },
       false, true},
      {"qwen3-30b-a3b", "grads.d_w_router",
       [&](FakeLayer& f) {
         f.g.loss_grads = TensorView::contiguous(f.g.d_w_router.data, f32, {2}, Device::kCuda);
       }, false, true},
      // Main-grad accumulation keeps fp32 expert gradients.
      {"qwen3-30b-a3b", "grads.d_w1",
       [&](FakeLayer& f) {
         f.g.accumulate = true;
         f.g.d_w1 = f.dev(bf, {128, 1536, 2048});
       }, false, true},
      {"qwen3-30b-a3b", "grads.d_w2",
       [&](FakeLayer& f) {
         f.g.accumulate = true;
         f.g.d_w2 = f.dev(bf, {128, 2048, 768});
       }, false, true},
  };
  for (const Mutation& m : mutations) {
    SCOPED_TRACE(std::string(m.preset) + " " + m.argument);
    FakeLayer f(preset(m.preset));
    m.mutate(f);
    if (m.forward) expect_invalid([&] { f.forward(); }, m.argument);
    if (m.backward) expect_invalid([&] { f.backward(); }, m.argument);
  }
}

TEST(LayerArgs, ConfigTheGpuPathCannotRunIsRejectedBeforeAnyCudaCall) {
  const std::vector<std::pair<std::string, std::function<void(MoeConfig&)>>> bad = {
      {"config.precision", [](MoeConfig& c) { c.precision = static_cast<PrecisionRecipe>(7); }},
      {"config.hidden",  // a multiple of 16 but not of 32: MXFP8 blocks are 32 wide
       [](MoeConfig& c) { c.precision = PrecisionRecipe::kMXFP8, c.hidden = 2064; }},
      {"config.ffn", [](MoeConfig& c) { c.precision = PrecisionRecipe::kMXFP8, c.ffn = 784; }},
      {"config.hidden", [](MoeConfig& c) { c.hidden = 2044; }},
      {"config.hidden", [](MoeConfig& c) { c.hidden = 0; }},
      {"config.ffn", [](MoeConfig& c) { c.ffn = 770; }},
      {"config.shared_expert_ffn", [](MoeConfig& c) { c.shared_expert_ffn = 12; }},
      {"config.num_experts", [](MoeConfig& c) { c.num_experts = 640; }},
      {"config.top_k", [](MoeConfig& c) { c.top_k = 17; }},
  };
  for (const auto& [argument, mutate] : bad) {
    SCOPED_TRACE(argument);
    MoeConfig c = preset("qwen3-30b-a3b");
    mutate(c);
    expect_invalid([&] { layer::check_layer_config(c); }, argument);
    // The constructor validates first: no cuBLAS handle or stream is created for a bad config.
    expect_invalid([&] { MoeLayer layer(c); }, argument);
  }
}

// MXFP8's region holds the four quantise-dequantised bf16 weight copies the forward and the
// backward read: both check it as they check FP8's (missing, too small), and the expert
// gradients may be bf16 or fp32.
TEST(LayerMxfp8Args, ForwardAndBackwardCheckTheWeightRegion) {
  MoeConfig c = preset("qwen3-30b-a3b");
  c.precision = PrecisionRecipe::kMXFP8;
  FakeLayer f(c);
  test::expect_invalid([&] { f.forward(); }, "weights.fp8");
  test::expect_invalid([&] { f.backward(); }, "weights.fp8");
  const size_t bytes = layer_memory_plan(c, {}, 1).fp8_weight_bytes;
  f.w.fp8 = {.data = f.dev(DType::kBFloat16, {1}).data, .bytes = bytes - 256};
  test::expect_invalid([&] { f.forward(); }, "weights.fp8");
  test::expect_invalid([&] { f.backward(); }, "weights.fp8");
  f.w.fp8.bytes = bytes;
  EXPECT_NO_THROW(f.forward());
  f.g.d_w1 = f.dev(DType::kBFloat16, {128, 1536, 2048});
  EXPECT_NO_THROW(f.backward());
}

// The FP8 backward's GEMMs read the FP8 weight copy (w1 for the recompute, w1t and w2t for the
// dgrads): backward checks the region as forward does.
TEST(LayerFp8Args, BackwardChecksTheFp8WeightRegion) {
  MoeConfig c = preset("deepseek-v3");
  c.precision = PrecisionRecipe::kFP8Blockwise;
  FakeLayer f(c);
  test::expect_invalid([&] { f.backward(); }, "weights.fp8");
  const size_t bytes = layer_memory_plan(c, {}, 1).fp8_weight_bytes;
  f.w.fp8 = {.data = f.dev(DType::kBFloat16, {1}).data, .bytes = bytes - 256};
  test::expect_invalid([&] { f.backward(); }, "weights.fp8");
  f.w.fp8.bytes = bytes;
  EXPECT_NO_THROW(f.backward());
  // Both wgrads write fp32 or bf16 expert gradients, nothing else.
  f.g.d_w2 = f.dev(DType::kBFloat16, {32, 7168, 2048});
  EXPECT_NO_THROW(f.backward());
  f.g.d_w2 = f.dev(DType::kFloat16, {32, 7168, 2048});
  test::expect_invalid([&] { f.backward(); }, "grads.d_w2");
  c.bf16_wgrad = true;
  FakeLayer b(c);
  b.w.fp8 = {.data = b.dev(DType::kBFloat16, {1}).data, .bytes = bytes};
  b.g.d_w2 = b.dev(DType::kBFloat16, {32, 7168, 2048});
  EXPECT_NO_THROW(b.backward());
}

// d_w1 and d_w2 in bf16 (each on its own) with bf16 precision: the wgrad rounds the fp32 sum once.
TEST(LayerArgs, ExpertGradsMayBeBf16) {
  FakeLayer f(preset("qwen3-30b-a3b"));
  const int64_t E = f.c.num_experts, H = f.c.hidden, F = f.c.ffn, fc1 = f.c.fc1_width();
  f.g.d_w1 = f.dev(DType::kBFloat16, {E, fc1, H});
  EXPECT_NO_THROW(f.backward());
  f.g.d_w2 = f.dev(DType::kBFloat16, {E, H, F});
  EXPECT_NO_THROW(f.backward());
}

TEST(LayerNames, EveryStageAndModeHasItsOwnName) {
  std::vector<std::string> names;
  for (int s = 0; s < static_cast<int>(LayerStage::kCount); ++s)
    names.emplace_back(layer_stage_name(static_cast<LayerStage>(s)));
  for (size_t i = 0; i < names.size(); ++i) {
    EXPECT_NE(names[i], "unknown");
    for (size_t j = i + 1; j < names.size(); ++j) EXPECT_NE(names[i], names[j]);
  }
  EXPECT_FALSE(layer_stage_is_backward(LayerStage::kCombine));
  EXPECT_TRUE(layer_stage_is_backward(LayerStage::kFc1Wgrad));
  EXPECT_NE(layer_mode_name(LayerMode::kFused), layer_mode_name(LayerMode::kUnfused));
}

// deinterleave_glu_weight undoes interleave_glu_weight on the host, weights and biases.
TEST(LayerGlu, DeinterleaveInvertsInterleave) {
  const int64_t E = 3, F = 32, H = 24;
  for (bool bias : {false, true}) {
    const int64_t inner = bias ? 1 : H;
    std::vector<float> ref = test::random_normal(E * 2 * F * inner), mid(ref.size()),
                       back(ref.size());
    auto view = [&](std::vector<float>& v) {
      return bias ? test::f32(v, {E, 2 * F}) : test::f32(v, {E, 2 * F, H});
    };
    interleave_glu_weight(view(ref), view(mid));
    EXPECT_NE(mid, ref);
    deinterleave_glu_weight(view(mid), view(back));
    EXPECT_EQ(back, ref);
  }
}

TEST(LayerGlu, DeinterleaveRejectsBadViews) {
  std::vector<float> a(2 * 32 * 8), b(a.size());
  expect_invalid([&] { deinterleave_glu_weight(test::f32(a, {512}), test::f32(b, {512})); },
                 "src");
  std::vector<float> c(2 * 24 * 8), d(c.size());
  expect_invalid(
      [&] { deinterleave_glu_weight(test::f32(c, {2, 24, 8}), test::f32(d, {2, 24, 8})); }, "src");
  expect_invalid(
      [&] { deinterleave_glu_weight(test::f32(a, {2, 32, 8}), test::f32(b, {2, 16, 16})); },
      "dst");
  expect_invalid(
      [&] { deinterleave_glu_weight(test::f32(a, {2, 32, 8}), test::f32(a, {2, 32, 8})); },
      "dst");
}

}  // namespace
}  // namespace moefuse
