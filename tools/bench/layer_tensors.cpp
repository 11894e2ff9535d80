#include "bench/layer_tensors.h"

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <vector>

#include "cuda/check.h"

namespace moefuse::bench {

LayerTensors::LayerTensors(const MoeConfig& config, int64_t tokens, RoutingDistribution routing,
                           uint64_t seed, int64_t held)
    : c(config), T(tokens), experts_held(held > 0 ? held : config.num_experts) {
  const int64_t E = experts_held, H = c.hidden, F = c.ffn, fc1 = c.fc1_width();
  const MoeConfig s = shared_expert_config(c);
  const bool shared = c.shared_expert_ffn > 0;
  const int64_t sfc1 = shared ? s.fc1_width() : 0, sF = shared ? s.ffn : 0;
  x = DeviceBuffer(2 * T * H), dy = DeviceBuffer(2 * T * H), y = DeviceBuffer(2 * T * H);
  dx = DeviceBuffer(2 * T * H), losses = DeviceBuffer(8);
  w_router = DeviceBuffer(2 * c.num_experts * H), dwr = DeviceBuffer(4 * c.num_experts * H);
  score_bias = DeviceBuffer(4 * c.num_experts);
  w1 = DeviceBuffer(2 * E * fc1 * H), dw1 = DeviceBuffer(4 * E * fc1 * H);
  w2 = DeviceBuffer(2 * E * H * F), dw2 = DeviceBuffer(4 * E * H * F);
  b1 = DeviceBuffer(4 * E * fc1), db1 = DeviceBuffer(4 * E * fc1);
  b2 = DeviceBuffer(4 * E * H), db2 = DeviceBuffer(4 * E * H);
  sw1 = DeviceBuffer(2 * sfc1 * H), dsw1 = DeviceBuffer(4 * sfc1 * H);
  sw2 = DeviceBuffer(2 * H * sF), dsw2 = DeviceBuffer(4 * H * sF);
  // Router weights: logit noise of about a Gumbel's spread (std ≈ 1.28) over x ~ U(-1, 1).
  const float wr = 3.84f / std::sqrt(static_cast<float>(H));
  fill_uniform_bf16(x.get(), T * H, -1, 1, seed + 1, nullptr);
  fill_uniform_bf16(dy.get(), T * H, -1, 1, seed + 2, nullptr);
  fill_uniform_bf16(w_router.get(), c.num_experts * H, -wr, wr, seed + 3, nullptr);
  fill_uniform_fp32(score_bias.get(), c.num_experts, -0.1f, 0.1f, seed + 4, nullptr);
  const float r1 = 1.0f / std::sqrt(static_cast<float>(H)), r2 = 1.0f / std::sqrt(float(F));
  fill_uniform_bf16(w1.get(), E * fc1 * H, -r1, r1, seed + 5, nullptr);
  fill_uniform_bf16(w2.get(), E * H * F, -r2, r2, seed + 6, nullptr);
  fill_uniform_fp32(b1.get(), E * fc1, -0.1f, 0.1f, seed + 7, nullptr);
  fill_uniform_fp32(b2.get(), E * H, -0.1f, 0.1f, seed + 8, nullptr);
  if (shared) {
    fill_uniform_bf16(sw1.get(), sfc1 * H, -r1, r1, seed + 9, nullptr);
    const float rs = 1.0f / std::sqrt(static_cast<float>(sF));
    fill_uniform_bf16(sw2.get(), H * sF, -rs, rs, seed + 10, nullptr);
  }
  MOEFUSE_CUDA_CHECK(cudaDeviceSynchronize());
  if (routing == RoutingDistribution::kZipf) skew_router(seed);
}

void LayerTensors::skew_router(uint64_t seed) {
  const int64_t E = c.num_experts, H = c.hidden;
  std::vector<int> rank(E);
  std::iota(rank.begin(), rank.end(), 1);
  std::shuffle(rank.begin(), rank.end(), std::mt19937_64(seed));
  std::vector<__nv_bfloat16> col(E), ones(T, __float2bfloat16(1.0f));
  for (int64_t e = 0; e < E; ++e) col[e] = __float2bfloat16(-1.2f * std::log(float(rank[e])));
  MOEFUSE_CUDA_CHECK(
      cudaMemcpy2D(w_router.get(), 2 * H, col.data(), 2, 2, E, cudaMemcpyHostToDevice));
  MOEFUSE_CUDA_CHECK(cudaMemcpy2D(x.get(), 2 * H, ones.data(), 2, 2, T, cudaMemcpyHostToDevice));
}

MoeLayerWeights LayerTensors::weights() const {
  const bool bias = c.expert_bias, shared = c.shared_expert_ffn > 0;
  auto f32 = [](const DeviceBuffer& b) { return static_cast<const float*>(b.get()); };
  return layer_weight_views(c,
                            {.w_router = w_router.get(),
                             .score_bias = c.router.use_score_bias ? f32(score_bias) : nullptr,
                             .w1 = w1.get(),
                             .b1 = bias ? f32(b1) : nullptr,
                             .w2 = w2.get(),
                             .b2 = bias ? f32(b2) : nullptr,
                             .shared_w1 = shared ? sw1.get() : nullptr,
                             .shared_w2 = shared ? sw2.get() : nullptr},
                            experts_held);
}

MoeLayerGrads LayerTensors::grads(DType expert_grads) const {
  const bool bias = c.expert_bias, shared = c.shared_expert_ffn > 0;
  auto f32 = [](const DeviceBuffer& b) { return static_cast<float*>(b.get()); };
  return layer_grad_views(c, T,
                          {.dx = dx.get(),
                           .d_w_router = f32(dwr),
                           .d_w1 = dw1.get(),
                           .d_b1 = bias ? f32(db1) : nullptr,
                           .d_w2 = dw2.get(),
                           .d_b2 = bias ? f32(db2) : nullptr,
                           .d_shared_w1 = shared ? f32(dsw1) : nullptr,
                           .d_shared_w2 = shared ? f32(dsw2) : nullptr,
                           .expert_grads = expert_grads},
                          experts_held);
}

MoeLayerOutputs LayerTensors::outputs() const {
  return {.y = y.view(DType::kBFloat16, {T, c.hidden}),
          .losses = losses.view(DType::kFloat32, {2})};
}

}  // namespace moefuse::bench
