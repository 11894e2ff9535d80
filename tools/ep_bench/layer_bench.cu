#include "ep_bench/layer_bench.h"

#include <cuda_runtime.h>

#include <functional>
#include <string>

#include "bench/cuda_graph.h"
#include "bench/device_buffer.h"
#include "bench/layer_tensors.h"
#include "bench/step_intervals.h"
#include "bench/timing.h"
#include "cuda/check.h"
#include "moefuse/ep_layer.h"
#include "moefuse/error.h"
#include "moefuse/health.h"

namespace moefuse::ep_bench {
namespace {

using bench::DeviceBuffer;
using Step = std::function<void(cudaStream_t, LayerObserver*)>;

// The timings of a layer whose forward and forward + backward are `forward` and `step`; each
// timing starts after `sync` (all ranks together, or nothing on one GPU).
LayerTiming time_layer(const Step& forward, const Step& step, int warmup, int iters,
                       const std::function<void()>& sync) {
  cudaStream_t stream = nullptr;
  MOEFUSE_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  LayerTiming t;
  sync();
  t.forward_ms =
      bench::time_on_stream([&](cudaStream_t s) { forward(s, nullptr); }, stream, warmup, iters)
          .median_ms;
  sync();
  t.step_ms =
      bench::time_on_stream([&](cudaStream_t s) { step(s, nullptr); }, stream, warmup, iters)
          .median_ms;
  {
    bench::StepIntervals intervals;
    sync();
    for (int i = 0; i < iters; ++i) {
      intervals.start_step(stream);
      step(stream, &intervals);
    }
    MOEFUSE_CUDA_CHECK(cudaStreamSynchronize(stream));
    const bench::StepIntervals::Medians m = intervals.medians();
    t.stages = m.stage_ms;
    t.transfer_ms = m.transfer_ms;
    t.exposed_transfer_ms = m.exposed_transfer_ms;
  }
  {
    const bench::Graph graph([&](cudaStream_t s) { step(s, nullptr); }, stream);
    sync();
    t.graph_step_ms = bench::time_on_stream([&](cudaStream_t s) { graph.launch(s); }, stream,
                                            warmup, iters)
                          .median_ms;
  }
  MOEFUSE_CUDA_CHECK(cudaStreamDestroy(stream));
  return t;
}

// `layer` (an EpMoeLayer or a MoeLayer) on `t`'s tensors and fresh cache and workspace.
template <class Layer>
LayerTiming time_on(Layer& layer, const bench::LayerTensors& t, size_t cache_bytes,
                    size_t workspace_bytes, int warmup, int iters,
                    const std::function<void()>& sync) {
  const DeviceBuffer cache(cache_bytes), work(workspace_bytes);
  const Workspace cache_ws{.data = cache.get(), .bytes = cache.bytes()},
      work_ws{.data = work.get(), .bytes = work.bytes()};
  const MoeLayerWeights w = t.weights();
  const MoeLayerGrads g = t.grads();
  const Step forward = [&](cudaStream_t s, LayerObserver* obs) {
    layer.forward(t.xv(), w, t.outputs(), cache_ws, work_ws, s, {.observer = obs});
  };
  const Step step = [&](cudaStream_t s, LayerObserver* obs) {
    forward(s, obs);
    layer.backward(t.xv(), t.dyv(), w, g, cache_ws, work_ws, s, {.observer = obs});
  };
  LayerTiming timing = time_layer(forward, step, warmup, iters, sync);
  timing.tokens = t.T;
  timing.local_experts = t.experts_held;
  return timing;
}

}  // namespace

LayerTiming time_ep_layer(const MoeConfig& c, EpLayerOptions options, int64_t tokens,
                          uint64_t seed, int warmup, int iters, ncclComm_t comm,
                          std::barrier<>& together) {
  options.max_tokens_per_rank = tokens;
  EpMoeLayer layer(c, comm, options);
  const bench::LayerTensors t(c, tokens, bench::RoutingDistribution::kUniform, seed,
                              layer.local_experts());
  const LayerTiming timing = time_on(layer, t, layer.cache_size(), layer.workspace_size(),
                                     warmup, iters, [&] { together.arrive_and_wait(); });
  // Timed rows that the transport dropped would flatter the result.
  const int32_t flags = read_health_flags(layer.transport_flags(), nullptr);
  if (flags != 0)
    throw Error("EpMoeLayer transport_flags() = " + std::to_string(flags) +
                " after the run (1: rows overflowed the receive capacity, 2: bad offsets)");
  return timing;
}

LayerTiming time_one_gpu_layer(const MoeConfig& c, int64_t tokens, uint64_t seed, int warmup,
                               int iters) {
  MoeLayer layer(c);
  const bench::LayerTensors t(c, tokens, bench::RoutingDistribution::kUniform, seed);
  return time_on(layer, t, layer.cache_size(tokens), layer.workspace_size(tokens), warmup, iters,
                 [] {});
}

}  // namespace moefuse::ep_bench
