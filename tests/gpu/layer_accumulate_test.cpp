// Main-grad accumulation (MoeLayerGrads::accumulate) on the GPU. A plain step gives every weight
// gradient G; then, from random fp32 values S in the gradient buffers, two backward passes with
// accumulate (from the same forward: backward only reads the cache) must leave (S + G) + G,
// each add one fp32 rounding: bit for bit for the expert weights (the wgrads' epilogues), the
// biases and the shared expert, within 1e-6 for the router's cuBLAS GEMM (its beta = 1 add need
// not round the same way); dx is overwritten, as without accumulate. Every precision and mode
// that writes the weight gradients by a different path: bf16 fused (qwen3), unfused with biases
// (gpt-oss), the shared expert and the sigmoid router (deepseek), the recomputed pre-activation,
// FP8 with FP8 wgrads, MXFP8.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "cuda/check.h"
#include "gpu/layer_test_fixture.h"

namespace moefuse {
namespace {

using Case = test::LayerCase;

std::vector<Case> cases() {
  MoeConfig fp8 = test::scaled_preset("qwen3-30b-a3b");
  fp8.precision = PrecisionRecipe::kFP8Blockwise;
  MoeConfig mx = test::scaled_preset("qwen3-30b-a3b");
  mx.precision = PrecisionRecipe::kMXFP8;
  return {
      {"qwen3_fused", test::scaled_preset("qwen3-30b-a3b"), {.mode = LayerMode::kFused}},
      {"gptoss_unfused", test::scaled_preset("gpt-oss-120b"), {.mode = LayerMode::kUnfused}},
      {"deepseek_fused", test::scaled_preset("deepseek-v3"), {.mode = LayerMode::kFused}},
      {"qwen3_recompute", test::scaled_preset("qwen3-30b-a3b"),
       {.mode = LayerMode::kFused, .recompute_pre = true}},
      {"qwen3_fp8", fp8, {.mode = LayerMode::kFused}},
      {"qwen3_mxfp8", mx, {.mode = LayerMode::kFused}},
  };
}

// The weight-gradient buffers of a DeviceLayer (those that exist), by name.
std::vector<std::pair<std::string, test::DeviceBuffer<float>*>> weight_grads(test::DeviceLayer& d) {
  std::vector<std::pair<std::string, test::DeviceBuffer<float>*>> out = {
      {"d_w_router", &d.d_w_router}, {"d_w1", &d.d_w1}, {"d_w2", &d.d_w2}};
  if (d.bias) out.insert(out.end(), {{"d_b1", &d.d_b1}, {"d_b2", &d.d_b2}});
  if (d.shared) out.insert(out.end(), {{"d_shared_w1", &d.d_sw1}, {"d_shared_w2", &d.d_sw2}});
  return out;
}

class LayerAccumulate : public ::testing::TestWithParam<Case> {};

TEST_P(LayerAccumulate, BackwardAddsEachStepsGradientsOnce) {
  MOEFUSE_REQUIRE_HOPPER();
  const Case& tc = GetParam();
  const int64_t T = 200;
  test::Stream stream;
  MoeLayer layer(tc.config, tc.options);
  test::DeviceLayer d(tc.config, tc.options, T);
  d.upload(test::LayerData::random(tc.config, T));
  ASSERT_EQ(test::run_poisoned_step(layer, d, stream), 0);
  std::vector<std::vector<float>> step;  // G, per weight gradient
  for (auto& [name, buffer] : weight_grads(d)) step.push_back(buffer->download());
  const std::vector<test::Bf16> dx = d.dx.download();

  std::vector<std::vector<float>> start;  // S
  for (auto& [name, buffer] : weight_grads(d)) {
    start.push_back(test::random_normal(buffer->size()));
    buffer->upload(start.back());
  }
  d.dx.poison();
  MOEFUSE_CUDA_CHECK(cudaDeviceSynchronize());
  MoeLayerGrads g = d.grads();
  g.accumulate = true;
  for (int pass = 0; pass < 2; ++pass)
    layer.backward(d.x_view(), d.dy_view(), d.weights(), g, d.cache_region(),
                   d.workspace_region(), stream);
  MOEFUSE_CUDA_CHECK(cudaStreamSynchronize(stream));

  const auto grads = weight_grads(d);
  for (size_t i = 0; i < grads.size(); ++i) {
    const std::string& name = grads[i].first;
    std::vector<float> want(start[i].size());
    for (size_t j = 0; j < want.size(); ++j) want[j] = (start[i][j] + step[i][j]) + step[i][j];
    const std::vector<float> got = grads[i].second->download();
    if (name == "d_w_router")
      EXPECT_LE(test::rel_norm_error(got, want), 1e-6) << name;
    else
      EXPECT_TRUE(test::same_bits(got, want, name + " after two accumulating passes"));
  }
  const std::vector<test::Bf16> dx_after = d.dx.download();
  EXPECT_EQ(std::memcmp(dx_after.data(), dx.data(), dx.size() * sizeof(test::Bf16)), 0)
      << "dx is overwritten, not accumulated";
}

INSTANTIATE_TEST_SUITE_P(Layer, LayerAccumulate, ::testing::ValuesIn(cases()),
                         [](const auto& info) { return info.param.name; });

}  // namespace
}  // namespace moefuse
