// The GPU MoE layer, forward and backward, against the CPU reference (src/ref/layer.h) on fresh
// random inputs: every preset scaled down (both router kinds, biases, clamped SwiGLU, the shared
// expert), every activation, fused and unfused, cached and recomputed pre-activation. Outputs,
// losses and every gradient are compared (tolerances in layer_test_fixture.h).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "cuda/check.h"
#include "gpu/layer_test_fixture.h"
#include "moefuse/health.h"

namespace moefuse {
namespace {

using Case = test::LayerCase;

std::vector<Case> cases() {
  std::vector<Case> out;
  const std::pair<const char*, const char*> presets[] = {{"qwen3", "qwen3-30b-a3b"},
                                                         {"gptoss", "gpt-oss-120b"},
                                                         {"mixtral", "mixtral-8x7b"},
                                                         {"deepseek", "deepseek-v3"}};
  for (const auto& [short_name, name] : presets) {
    for (LayerMode mode : {LayerMode::kFused, LayerMode::kUnfused}) {
      out.push_back({std::string(short_name) + "_" + std::string(layer_mode_name(mode)),
                     test::scaled_preset(name), {.mode = mode}});
    }
    out.push_back({std::string(short_name) + "_fused_recompute", test::scaled_preset(name),
                   {.mode = LayerMode::kFused, .recompute_pre = true}});
  }
  out.push_back({"deepseek_unfused_recompute", test::scaled_preset("deepseek-v3"),
                 {.mode = LayerMode::kUnfused, .recompute_pre = true}});
  for (Activation a : {Activation::kGeGLU, Activation::kReGLU, Activation::kSquaredReLU}) {
    MoeConfig c = test::scaled_preset("qwen3-30b-a3b");
    c.activation = a;
    c.expert_bias = true;
    for (LayerMode mode : {LayerMode::kFused, LayerMode::kUnfused})
      out.push_back({std::string(activation_name(a)) + "_" + std::string(layer_mode_name(mode)),
                     c, {.mode = mode}});
  }
  return out;
}

class LayerReference : public ::testing::TestWithParam<Case> {};

TEST_P(LayerReference, ForwardAndBackwardMatchReference) {
  MOEFUSE_REQUIRE_HOPPER();
  const Case& tc = GetParam();
  const int64_t T = 200;
  cudaStream_t stream = nullptr;
  MOEFUSE_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  MoeLayer layer(tc.config, tc.options);
  test::DeviceLayer d(tc.config, tc.options, T);
  const test::LayerData data = test::LayerData::random(tc.config, T);
  d.upload(data);
  EXPECT_EQ(test::run_poisoned_step(layer, d, stream), 0);
  test::expect_matches(test::download(d), test::reference_step(data));
  cudaStreamDestroy(stream);
}

INSTANTIATE_TEST_SUITE_P(Layer, LayerReference, ::testing::ValuesIn(cases()),
                         [](const auto& info) { return info.param.name; });

}  // namespace
}  // namespace moefuse
