// Shared pieces of the layer GPU tests: scaled-down preset configs, the device copy of a layer's
// data (common/layer_step.h: fresh random inputs, the reference step, the comparison) in the GPU
// layout (bf16, GLU rows interleaved), and its results downloaded back to the reference layout.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "common/layer_step.h"
#include "common/test_util.h"
#include "gpu/dispatch_test_util.h"
#include "moefuse/grouped_gemm.h"
#include "moefuse/health.h"
#include "moefuse/layer.h"
#include "ref/layer.h"

namespace moefuse::test {

// The preset's kind of layer at test size: H 256, F 128, at most 16 experts and top-4, shared
// F 128, aux and z losses on.
inline MoeConfig scaled_preset(const std::string& name) {
  MoeConfig c = preset(name);
  c.hidden = 256;
  c.ffn = 128;
  c.num_experts = std::min<int64_t>(c.num_experts, 16);
  c.top_k = std::min<int64_t>(c.top_k, 4);
  if (c.shared_expert_ffn > 0) c.shared_expert_ffn = 128;
  if (c.router.kind == RouterKind::kSigmoidGroupTopK) {
    c.router.num_groups = 8;
    c.router.topk_groups = 4;
  }
  c.router.aux_loss_coeff = 0.01f;
  c.router.z_loss_coeff = 0.001f;
  return c;
}

// One case of a parameterised layer test: its name (the test's suffix), config and options.
struct LayerCase {
  std::string name;
  MoeConfig config;
  LayerOptions options;
};

// [gate; up] → interleaved rows on the host (GLU only; identity otherwise).
inline std::vector<float> interleaved(const MoeConfig& c, const std::vector<float>& v,
                                      int64_t outer, int64_t rows, int64_t inner) {
  if (!is_glu(c.activation) || v.empty()) return v;
  std::vector<float> out(v.size());
  std::vector<float> in = v;
  const TensorView src = inner > 1
      ? TensorView::contiguous(in.data(), DType::kFloat32, {outer, rows, inner})
      : TensorView::contiguous(in.data(), DType::kFloat32, {outer, rows});
  const TensorView dst = inner > 1
      ? TensorView::contiguous(out.data(), DType::kFloat32, {outer, rows, inner})
      : TensorView::contiguous(out.data(), DType::kFloat32, {outer, rows});
  interleave_glu_weight(src, dst);
  return out;
}

// Interleaved → [gate; up] (the gradients of interleaved weights), host.
inline std::vector<float> deinterleaved(const MoeConfig& c, std::vector<float> v, int64_t outer,
                                        int64_t rows, int64_t inner) {
  if (!is_glu(c.activation) || v.empty()) return v;
  std::vector<float> out(v.size());
  const TensorView src = inner > 1
      ? TensorView::contiguous(v.data(), DType::kFloat32, {outer, rows, inner})
      : TensorView::contiguous(v.data(), DType::kFloat32, {outer, rows});
  const TensorView dst = inner > 1
      ? TensorView::contiguous(out.data(), DType::kFloat32, {outer, rows, inner})
      : TensorView::contiguous(out.data(), DType::kFloat32, {outer, rows});
  deinterleave_glu_weight(src, dst);
  return out;
}

// Everything one layer call reads and writes on the device, sized for (config, options, T).
// A non-blocking stream owned for one test (the layer's own streams are non-blocking too).
class Stream {
 public:
  Stream() { MOEFUSE_CUDA_CHECK(cudaStreamCreateWithFlags(&s_, cudaStreamNonBlocking)); }
  ~Stream() { cudaStreamDestroy(s_); }
  operator cudaStream_t() const { return s_; }

 private:
  cudaStream_t s_ = nullptr;
};

struct DeviceLayer {
  MoeConfig c;
  int64_t T;
  bool bias, shared, sbias;
  DeviceBuffer<Bf16> x, w_router, w1, w2, sw1, sw2, dy, y, dx;
  DeviceBuffer<float> score_bias, b1, b2, losses, d_w_router, d_w1, d_b1, d_w2, d_b2, d_sw1,
      d_sw2;
  DeviceBuffer<unsigned char> cache, workspace;
  DeviceBuffer<unsigned char> fp8;  // the FP8 weight region (empty with bf16)

  DeviceLayer(const MoeConfig& config, const LayerOptions& options, int64_t tokens)
      : c(config), T(tokens), bias(config.expert_bias), shared(config.shared_expert_ffn > 0),
        sbias(config.router.use_score_bias),
        x(T * c.hidden), w_router(c.num_experts * c.hidden),
        w1(c.num_experts * c.fc1_width() * c.hidden), w2(c.num_experts * c.hidden * c.ffn),
        sw1(shared ? shared_expert_config(c).fc1_width() * c.hidden : 0),
        sw2(shared ? c.hidden * c.shared_expert_ffn : 0), dy(T * c.hidden), y(T * c.hidden),
        dx(T * c.hidden), score_bias(sbias ? c.num_experts : 0),
        b1(bias ? c.num_experts * c.fc1_width() : 0), b2(bias ? c.num_experts * c.hidden : 0),
        losses(2), d_w_router(c.num_experts * c.hidden), d_w1(w1.size()), d_b1(b1.size()),
        d_w2(w2.size()), d_b2(b2.size()), d_sw1(sw1.size()), d_sw2(sw2.size()),
        cache(layer_memory_plan(config, options, tokens).cache_bytes),
        workspace(layer_memory_plan(config, options, tokens).workspace_bytes),
        fp8(layer_memory_plan(config, options, tokens).fp8_weight_bytes) {}

  void upload(const LayerData& d) {
    MOEFUSE_CUDA_CHECK(cudaDeviceSynchronize());
    const int64_t E = c.num_experts, H = c.hidden, fc1 = c.fc1_width();
    const int64_t s_fc1 = shared_expert_config(c).fc1_width();
    x.upload(to_bf16(d.x));
    w_router.upload(to_bf16(d.w_router));
    w1.upload(to_bf16(interleaved(c, d.w1, E, fc1, H)));
    w2.upload(to_bf16(d.w2));
    dy.upload(to_bf16(d.dy));
    if (sbias) score_bias.upload(d.score_bias);
    if (bias) b1.upload(interleaved(c, d.b1, E, fc1, 1)), b2.upload(d.b2);
    if (shared) sw1.upload(to_bf16(interleaved(c, d.sw1, 1, s_fc1, H))), sw2.upload(to_bf16(d.sw2));
  }

  // Every output, gradient and both regions NaN / 0xFF-filled: unwritten values show. The
  // memsets run on the legacy stream; the device-wide sync orders them against the layer's
  // non-blocking streams.
  void poison() {
    MOEFUSE_CUDA_CHECK(cudaDeviceSynchronize());
    for (auto* b : {&y, &dx}) b->poison();
    for (auto* b : {&losses, &d_w_router, &d_w1, &d_b1, &d_w2, &d_b2, &d_sw1, &d_sw2}) b->poison();
    cache.poison();
    workspace.poison();
    fp8.poison();
    MOEFUSE_CUDA_CHECK(cudaDeviceSynchronize());
  }
  // The scratch alone, between forward and backward: backward must not read forward's scratch.
  void poison_workspace() {
    MOEFUSE_CUDA_CHECK(cudaDeviceSynchronize());
    workspace.poison();
    MOEFUSE_CUDA_CHECK(cudaDeviceSynchronize());
  }

  MoeLayerWeights weights() const {
    return layer_weight_views(c, {.w_router = w_router.data(),
                                  .score_bias = sbias ? score_bias.data() : nullptr,
                                  .w1 = w1.data(),
                                  .b1 = bias ? b1.data() : nullptr,
                                  .w2 = w2.data(),
                                  .b2 = bias ? b2.data() : nullptr,
                                  .shared_w1 = shared ? sw1.data() : nullptr,
                                  .shared_w2 = shared ? sw2.data() : nullptr,
                                  .fp8 = fp8.size() ? fp8.data() : nullptr,
                                  .fp8_bytes = fp8.size()});
  }
  MoeLayerGrads grads() const {
    return layer_grad_views(c, T,
                            {.dx = dx.data(),
                             .d_w_router = d_w_router.data(),
                             .d_w1 = d_w1.data(),
                             .d_b1 = bias ? d_b1.data() : nullptr,
                             .d_w2 = d_w2.data(),
                             .d_b2 = bias ? d_b2.data() : nullptr,
                             .d_shared_w1 = shared ? d_sw1.data() : nullptr,
                             .d_shared_w2 = shared ? d_sw2.data() : nullptr});
  }
  MoeLayerOutputs outputs() const {
    return {.y = y.view(DType::kBFloat16, {T, c.hidden}),
            .losses = losses.view(DType::kFloat32, {2})};
  }
  TensorView x_view() const { return x.view(DType::kBFloat16, {T, c.hidden}); }
  TensorView dy_view() const { return dy.view(DType::kBFloat16, {T, c.hidden}); }
  Workspace cache_region() const { return {.data = cache.data(), .bytes = cache.size()}; }
  Workspace workspace_region() const {
    return {.data = workspace.data(), .bytes = workspace.size()};
  }

  // FP8 layers quantise their weights first (once per step in training; here every step).
  void forward(MoeLayer& layer, cudaStream_t s) {
    if (fp8.size()) layer.prepare_fp8_weights(weights(), s);
    layer.forward(x_view(), weights(), outputs(), cache_region(), workspace_region(), s);
  }
  void backward(MoeLayer& layer, cudaStream_t s) {
    layer.backward(x_view(), dy_view(), weights(), grads(), cache_region(), workspace_region(),
                   s);
  }
};

// One step of `layer` on d's uploaded inputs: every output poisoned first (FP8 weights then
// prepared again) and the workspace again between forward and backward (backward must not read
// the forward's scratch). Returns the health flags the step raised; the stream is synchronised.
inline int run_poisoned_step(MoeLayer& layer, DeviceLayer& d, cudaStream_t stream) {
  DeviceBuffer<int32_t> health(1);
  d.poison();
  if (d.fp8.size()) layer.prepare_fp8_weights(d.weights(), stream);
  const LayerRun run{.health = health.view(DType::kInt32, {1})};
  reset_health_flags(run.health, stream);
  layer.forward(d.x_view(), d.weights(), d.outputs(), d.cache_region(), d.workspace_region(),
                stream, run);
  d.poison_workspace();
  layer.backward(d.x_view(), d.dy_view(), d.weights(), d.grads(), d.cache_region(),
                 d.workspace_region(), stream, run);
  const int flags = read_health_flags(run.health, stream);
  MOEFUSE_CUDA_CHECK(cudaStreamSynchronize(stream));
  return flags;
}

inline StepResult download(const DeviceLayer& d) {
  const MoeConfig& c = d.c;
  const int64_t E = c.num_experts, H = c.hidden, fc1 = c.fc1_width();
  const int64_t s_fc1 = shared_expert_config(c).fc1_width();
  StepResult r;
  r.tensors = {{"y", from_bf16(d.y.download())},
               {"losses", d.losses.download()},
               {"dx", from_bf16(d.dx.download())},
               {"d_w_router", d.d_w_router.download()},
               {"d_w1", deinterleaved(c, d.d_w1.download(), E, fc1, H)},
               {"d_w2", d.d_w2.download()}};
  if (d.bias) {
    r.tensors.push_back({"d_b1", deinterleaved(c, d.d_b1.download(), E, fc1, 1)});
    r.tensors.push_back({"d_b2", d.d_b2.download()});
  }
  if (d.shared) {
    r.tensors.push_back({"d_shared_w1", deinterleaved(c, d.d_sw1.download(), 1, s_fc1, H)});
    r.tensors.push_back({"d_shared_w2", d.d_sw2.download()});
  }
  return r;
}

// Every output and gradient within its tolerance (common/layer_step.h), each miss a failure.
inline void expect_matches(const StepResult& got, const StepResult& want) {
  for (const std::string& miss : step_mismatches(got, want)) ADD_FAILURE() << miss;
}

// Bitwise equality of two steps' results, naming the first differing element.
inline void expect_same_bits(const StepResult& a, const StepResult& b, const std::string& what) {
  for (const auto& [name, v] : a.tensors) EXPECT_TRUE(same_bits(v, b.at(name), what + " " + name));
}

}  // namespace moefuse::test
