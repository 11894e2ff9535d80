// d_w1 and d_w2 in bf16 (MoeLayerGrads): the same step as with fp32 expert gradients, each bf16
// gradient the fp32 one rounded to nearest even (the wgrad sums an expert's rows in fp32 and
// rounds once), every other output bit for bit the same. Both modes: the fused one takes dW1
// from the gather wgrad, the unfused one from the TMA wgrad.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <string>
#include <tuple>
#include <vector>

#include "cuda/check.h"
#include "gpu/layer_test_fixture.h"

namespace moefuse {
namespace {

void expect_bf16_grads_are_the_fp32_ones_rounded(const std::string& name, LayerMode mode) {
  SCOPED_TRACE(name + " " + std::string(layer_mode_name(mode)) + " seed " +
               std::to_string(test::seed()));
  const MoeConfig c = test::scaled_preset(name);
  const LayerOptions options{.mode = mode};
  const int64_t T = 333, E = c.num_experts, H = c.hidden, F = c.ffn, fc1 = c.fc1_width();
  test::Stream stream;
  MoeLayer layer(c, options);
  test::DeviceLayer d(c, options, T);
  d.upload(test::LayerData::random(c, T));
  EXPECT_EQ(test::run_poisoned_step(layer, d, stream), 0);
  const test::StepResult fp32 = test::download(d);
  const std::vector<float> dw1 = d.d_w1.download(), dw2 = d.d_w2.download();

  test::DeviceBuffer<test::Bf16> dw1_bf16(dw1.size()), dw2_bf16(dw2.size());
  d.poison();
  dw1_bf16.poison();
  dw2_bf16.poison();
  MOEFUSE_CUDA_CHECK(cudaDeviceSynchronize());
  MoeLayerGrads g = d.grads();
  g.d_w1 = dw1_bf16.view(DType::kBFloat16, {E, fc1, H});
  g.d_w2 = dw2_bf16.view(DType::kBFloat16, {E, H, F});
  layer.forward(d.x_view(), d.weights(), d.outputs(), d.cache_region(), d.workspace_region(),
                stream);
  layer.backward(d.x_view(), d.dy_view(), d.weights(), g, d.cache_region(),
                 d.workspace_region(), stream);
  MOEFUSE_CUDA_CHECK(cudaStreamSynchronize(stream));

  for (const auto& [what, got, want] :
       {std::tuple{"d_w1", dw1_bf16.download(), test::to_bf16(dw1)},
        std::tuple{"d_w2", dw2_bf16.download(), test::to_bf16(dw2)}}) {
    EXPECT_TRUE(test::same_bits(test::from_bf16(got), test::from_bf16(want),
                                std::string(what) + " bf16 vs fp32 rounded"));
  }
  // Everything else is the fp32 step's, bit for bit (d_w1 and d_w2 there are the fp32 ones).
  test::StepResult bf16 = test::download(d);
  for (auto& [tensor, v] : bf16.tensors)
    if (tensor != "d_w1" && tensor != "d_w2")
      EXPECT_TRUE(test::same_bits(v, fp32.at(tensor), "bf16-grads step vs fp32: " + tensor));
}

TEST(LayerExpertGrads, Bf16IsTheFp32GradientRounded) {
  MOEFUSE_REQUIRE_HOPPER();
  for (const char* name : {"qwen3-30b-a3b", "gpt-oss-120b"})
    for (LayerMode mode : {LayerMode::kFused, LayerMode::kUnfused})
      expect_bf16_grads_are_the_fp32_ones_rounded(name, mode);
}

}  // namespace
}  // namespace moefuse
