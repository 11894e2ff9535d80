// A layer's inputs, weights and gradients on the device, filled with fresh random values: what
// moefuse-bench layer and moefuse-ep-bench's layer part run on.
#pragma once

#include <cstdint>

#include "bench/device_buffer.h"
#include "bench/routing.h"
#include "moefuse/config.h"
#include "moefuse/layer.h"
#include "moefuse/tensor.h"

namespace moefuse::bench {

struct LayerTensors {
  MoeConfig c;
  int64_t T;
  int64_t experts_held;  // experts whose weights and gradients are here (EP: a rank's)
  DeviceBuffer x, w_router, score_bias, w1, b1, w2, b2, sw1, sw2, dy, y, losses, dx, dwr, dw1,
      db1, dw2, db2, dsw1, dsw2;

  // experts_held 0: all E. Every tensor is drawn from its own stream of `seed`; expert-parallel
  // ranks pass seed + rank for independent tokens and experts.
  LayerTensors(const MoeConfig& config, int64_t tokens, RoutingDistribution routing,
               uint64_t seed, int64_t experts_held = 0);

  // x[:, 0] = 1 and w_router[e, 0] = log(popularity_e): a per-expert logit offset.
  void skew_router(uint64_t seed);

  MoeLayerWeights weights() const;
  // d_w1 and d_w2 in `expert_grads` (kFloat32 or kBFloat16; their buffers fit either).
  MoeLayerGrads grads(DType expert_grads = DType::kFloat32) const;
  MoeLayerOutputs outputs() const;
  TensorView xv() const { return x.view(DType::kBFloat16, {T, c.hidden}); }
  TensorView dyv() const { return dy.view(DType::kBFloat16, {T, c.hidden}); }
};

}  // namespace moefuse::bench
