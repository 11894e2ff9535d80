// The losses' upstream gradient (MoeLayerGrads::loss_grads, read on the device by the router's
// backward) on the GPU. The forward's routing does not depend on the loss coefficients α, β, so a
// backward given γ = {γa, γz} must give bit for bit the gradients of a layer whose coefficients
// are γa·α and γz·β without it: γ = 1 is the default, γ = 0 a layer without the losses (what
// autograd asks for when the caller never uses them). (γ < 0 works too, but a config takes no
// negative coefficient to compare it with.) Checked for the softmax (qwen3's) and the
// sigmoid group (deepseek's, with its shared expert) routers, eagerly and through a captured
// graph replayed with new γ in device memory; and against the CPU reference with the scaled
// coefficients.
#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

#include "cuda/check.h"
#include "gpu/layer_test_fixture.h"

namespace moefuse {
namespace {

// r without the forward's outputs (y and the losses: the scaled layers compute other losses).
test::StepResult gradients_of(test::StepResult r) {
  std::erase_if(r.tensors, [](const auto& t) { return t.first == "y" || t.first == "losses"; });
  return r;
}

// Every gradient of one forward + backward.
test::StepResult gradients(MoeLayer& layer, test::DeviceLayer& d, const TensorView& loss_grads,
                           cudaStream_t stream) {
  d.poison();
  d.forward(layer, stream);
  MoeLayerGrads g = d.grads();
  g.loss_grads = loss_grads;
  layer.backward(d.x_view(), d.dy_view(), d.weights(), g, d.cache_region(),
                 d.workspace_region(), stream);
  MOEFUSE_CUDA_CHECK(cudaStreamSynchronize(stream));
  return gradients_of(test::download(d));
}

MoeConfig scaled_losses(MoeConfig c, float ga, float gz) {
  c.router.aux_loss_coeff *= ga;
  c.router.z_loss_coeff *= gz;
  return c;
}

TEST(LayerLossGrads, ScaleTheRouterLossGradientsOnTheDevice) {
  MOEFUSE_REQUIRE_HOPPER();
  const int64_t T = 200;
  test::Stream stream;
  for (const char* name : {"qwen3-30b-a3b", "deepseek-v3"}) {
    SCOPED_TRACE(std::string(name) + " seed=" + std::to_string(test::seed()));
    const MoeConfig c = test::scaled_preset(name);
    const test::LayerData data = test::LayerData::random(c, T);
    test::DeviceLayer d(c, {}, T);
    d.upload(data);
    MoeLayer layer(c, {});
    test::DeviceBuffer<float> gamma(2);
    const TensorView gamma_view = gamma.view(DType::kFloat32, {2});
    const test::StepResult plain = gradients(layer, d, TensorView{}, stream);
    gamma.upload({1.0f, 1.0f});
    test::expect_same_bits(gradients(layer, d, gamma_view, stream), plain, "γ = {1, 1}");
    for (const auto [ga, gz] : {std::pair{0.0f, 0.0f}, std::pair{2.0f, 0.0f},
                                std::pair{0.0f, 3.0f}, std::pair{1.5f, 0.25f}}) {
      const std::string what = "γ = {" + std::to_string(ga) + ", " + std::to_string(gz) + "}";
      gamma.upload({ga, gz});
      const test::StepResult got = gradients(layer, d, gamma_view, stream);
      MoeLayer scaled(scaled_losses(c, ga, gz), {});
      test::expect_same_bits(got, gradients(scaled, d, TensorView{}, stream), what);
    }
    // The CPU reference of the scaled layer, for one γ (the gradients only).
    gamma.upload({2.0f, 0.0f});
    test::StepResult got = gradients(layer, d, gamma_view, stream);
    test::LayerData scaled_data = data;
    scaled_data.c = scaled_losses(c, 2.0f, 0.0f);
    test::expect_matches(got, gradients_of(test::reference_step(scaled_data)));
  }
}

TEST(LayerLossGrads, AGraphReadsTheUpstreamGradientAtReplay) {
  MOEFUSE_REQUIRE_HOPPER();
  const int64_t T = 128;
  test::Stream stream;
  const MoeConfig c = test::scaled_preset("qwen3-30b-a3b");
  test::DeviceLayer d(c, {}, T);
  d.upload(test::LayerData::random(c, T));
  MoeLayer layer(c, {});
  test::DeviceBuffer<float> gamma(std::vector<float>{1.0f, 1.0f});
  MoeLayerGrads g = d.grads();
  g.loss_grads = gamma.view(DType::kFloat32, {2});
  d.poison();
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  MOEFUSE_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  d.forward(layer, stream);
  layer.backward(d.x_view(), d.dy_view(), d.weights(), g, d.cache_region(), d.workspace_region(),
                 stream);
  MOEFUSE_CUDA_CHECK(cudaStreamEndCapture(stream, &graph));
  MOEFUSE_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
  for (const auto [ga, gz] : {std::pair{0.0f, 0.0f}, std::pair{2.0f, 0.5f}}) {
    const std::string what = "replay with γ = {" + std::to_string(ga) + ", " +
                             std::to_string(gz) + "}";
    MOEFUSE_CUDA_CHECK(cudaDeviceSynchronize());
    gamma.upload({ga, gz});
    MOEFUSE_CUDA_CHECK(cudaGraphLaunch(exec, stream));
    MOEFUSE_CUDA_CHECK(cudaStreamSynchronize(stream));
    const test::StepResult replayed = gradients_of(test::download(d));
    MoeLayer scaled(scaled_losses(c, ga, gz), {});
    test::expect_same_bits(replayed, gradients(scaled, d, TensorView{}, stream), what);
  }
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
}

}  // namespace
}  // namespace moefuse
