// Validation of the router entry points (host only, before any CUDA call).
#pragma once

#include <cstdint>

#include "moefuse/config.h"
#include "moefuse/router.h"
#include "moefuse/tensor.h"

namespace moefuse::cuda {

struct RouterShape {
  int64_t tokens, experts;
};

// Options against E and k (the config's own checks, names "config.*") plus the GPU limits.
void check_router_options(const RouterOptions& options, int64_t top_k, int64_t num_experts);

RouterShape check_router_topk(const RouterOptions& options, int64_t top_k,
                              const TensorView& logits, const TensorView& score_bias,
                              const RouterOutputs& out);

RouterShape check_router_topk_backward(const RouterOptions& options, int64_t top_k,
                                       const TensorView& logits, const TensorView& expert_idx,
                                       const TensorView& counts, const TensorView& d_probs,
                                       const TensorView& loss_grads, const TensorView& d_logits);

struct GemmShape {
  int64_t tokens, hidden, experts;
};

GemmShape check_router_logits(const TensorView& x, const TensorView& w_router,
                              const TensorView& logits);

GemmShape check_router_logits_backward(const TensorView& x, const TensorView& w_router,
                                       const TensorView& d_logits, const TensorView& dx,
                                       const TensorView& d_w_router);

}  // namespace moefuse::cuda
