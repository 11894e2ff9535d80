// Validation of the layer's entry points: host only, before any CUDA call, so a bad argument
// never leaves half a step enqueued (and the bad-input tests run without a GPU).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>

#include "moefuse/config.h"
#include "moefuse/layer.h"
#include "moefuse/tensor.h"
#include "moefuse/workspace.h"

namespace moefuse::layer {

// The config's own checks plus what the GPU path needs: bf16, blockwise-FP8 or MXFP8
// precision, H, F and the shared F multiples of 8 (16-byte rows), E and k within the router's
// and dispatch's limits; FP8 also H and F multiples of 16 (16-byte e4m3 rows; expert biases
// enter the FP8 epilogues), MXFP8 multiples of 32 (whole blocks).
void check_layer_config(const MoeConfig& config);

// options.mode a LayerMode; kFused with a low-precision recipe (one fused pipeline each).
void check_layer_options(const MoeConfig& config, const LayerOptions& options);

// kFP8Blockwise, kMXFP8: weights.w1 and weights.w2 (bf16) and the region weights.fp8 (the
// quantised copy), which must not overlap them. Names:
// config.precision, weights.w1, weights.w2, weights.fp8.
void check_fp8_weights(const MoeConfig& config, const MoeLayerWeights& weights);

// Returns T. Names: x, weights.* (weights.fp8 with FP8), out.y, out.losses, cache, workspace,
// health. Each output (out.*, cache, workspace, health) must not overlap another argument.
int64_t check_layer_forward(const MoeConfig& config, const LayerOptions& options,
                            const TensorView& x, const MoeLayerWeights& weights,
                            const MoeLayerOutputs& out, const Workspace& cache,
                            const Workspace& workspace, const TensorView& health);

// Returns T. Names: x, dy, weights.* (weights.fp8 with FP8), grads.*, cache, workspace, health.
// Each output (grads.*, workspace, health) must not overlap another argument.
int64_t check_layer_backward(const MoeConfig& config, const LayerOptions& options,
                             const TensorView& x, const TensorView& dy,
                             const MoeLayerWeights& weights, const MoeLayerGrads& grads,
                             const Workspace& cache, const Workspace& workspace,
                             const TensorView& health);

// What a layer's forward and backward arguments are checked against, beyond the config: the
// experts whose weights (and weight gradients) the caller passes (MoeLayer: all E; EpMoeLayer: its
// rank's), the most tokens one call takes, and the cache and workspace bytes for T tokens.
struct RegionBytes {
  size_t cache = 0, workspace = 0;
};
struct ArgBounds {
  int64_t experts_held = 0;
  int64_t max_tokens = 0;
  std::function<RegionBytes(int64_t tokens)> region_bytes;
};

// check_layer_forward / check_layer_backward against `bounds` (with an FP8 recipe also the FP8
// weight copy, of all E experts: only the one-GPU layer has one).
int64_t check_forward_args(const MoeConfig& config, const ArgBounds& bounds, const TensorView& x,
                           const MoeLayerWeights& weights, const MoeLayerOutputs& out,
                           const Workspace& cache, const Workspace& workspace,
                           const TensorView& health);
int64_t check_backward_args(const MoeConfig& config, const ArgBounds& bounds,
                            const TensorView& x, const TensorView& dy,
                            const MoeLayerWeights& weights, const MoeLayerGrads& grads,
                            const Workspace& cache, const Workspace& workspace,
                            const TensorView& health);

}  // namespace moefuse::layer
