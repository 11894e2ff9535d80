// The layer's forward + backward captured as ONE CUDA graph (both streams) and replayed on new
// inputs written into the same buffers: each replay equals an eager run bit for bit and matches
// the reference. And repeated eager runs are bitwise identical (no float atomics anywhere).
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <string>

#include "cuda/check.h"
#include "gpu/layer_test_fixture.h"

namespace moefuse {
namespace {

test::StepResult eager_step(MoeLayer& layer, test::DeviceLayer& d, cudaStream_t stream) {
  d.poison();
  d.forward(layer, stream);
  d.backward(layer, stream);
  MOEFUSE_CUDA_CHECK(cudaStreamSynchronize(stream));
  return test::download(d);
}

void capture_replay(const MoeConfig& config, const LayerOptions& options) {
  const int64_t T = 200;
  test::Stream stream;
  MoeLayer layer(config, options);
  test::DeviceLayer d(config, options, T);
  d.upload(test::LayerData::random(config, T));
  d.poison();

  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  MOEFUSE_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  d.forward(layer, stream);
  d.backward(layer, stream);
  MOEFUSE_CUDA_CHECK(cudaStreamEndCapture(stream, &graph));
  MOEFUSE_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
  size_t nodes = 0;
  MOEFUSE_CUDA_CHECK(cudaGraphGetNodes(graph, nullptr, &nodes));
  EXPECT_GT(nodes, 10u) << "the graph should hold the whole step";

  for (int replay = 0; replay < 3; ++replay) {
    SCOPED_TRACE("replay " + std::to_string(replay) + " seed=" + std::to_string(test::seed()));
    const test::LayerData data = test::LayerData::random(config, T);
    d.upload(data);
    d.poison();
    MOEFUSE_CUDA_CHECK(cudaGraphLaunch(exec, stream));
    MOEFUSE_CUDA_CHECK(cudaStreamSynchronize(stream));
    const test::StepResult graphed = test::download(d);
    test::expect_matches(graphed, test::reference_step(data));
    test::expect_same_bits(graphed, eager_step(layer, d, stream), "graph vs eager:");
  }
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
}

TEST(LayerGraph, FusedSharedExpertCaptureOnceReplayOnNewInputs) {
  MOEFUSE_REQUIRE_HOPPER();
  capture_replay(test::scaled_preset("deepseek-v3"), {.mode = LayerMode::kFused});
}

TEST(LayerGraph, UnfusedRecomputeCaptureOnceReplayOnNewInputs) {
  MOEFUSE_REQUIRE_HOPPER();
  capture_replay(test::scaled_preset("gpt-oss-120b"),
                 {.mode = LayerMode::kUnfused, .recompute_pre = true});
}

TEST(LayerDeterminism, RepeatedRunsAreBitwiseIdentical) {
  MOEFUSE_REQUIRE_HOPPER();
  for (const char* name : {"qwen3-30b-a3b", "gpt-oss-120b", "mixtral-8x7b", "deepseek-v3"}) {
    for (LayerMode mode : {LayerMode::kFused, LayerMode::kUnfused}) {
      SCOPED_TRACE(std::string(name) + " " + std::string(layer_mode_name(mode)) +
                   " seed=" + std::to_string(test::seed()));
      const MoeConfig c = test::scaled_preset(name);
      const LayerOptions o{.mode = mode};
      test::Stream stream;
      MoeLayer layer(c, o);
      // Enough tokens that many CTAs share every expert's rows and the wgrad reductions are long.
      const int64_t T = 2048;
      test::DeviceLayer d(c, o, T);
      d.upload(test::LayerData::random(c, T));
      const test::StepResult first = eager_step(layer, d, stream);
      test::expect_same_bits(eager_step(layer, d, stream), first, "second run:");
    }
  }
}

}  // namespace
}  // namespace moefuse
