// The layer's routing, shared by MoeLayer and EpMoeLayer: the router (logits GEMM, fused top-k
// with the aux/z statistics) and the dispatch maps (offsets, row_of, token_of_row; align 1) of a
// call's own tokens. `Views` is either layer's views of its memory plan (cuda/layer/views.h,
// dist/ep_layer_plan.h), which name these buffers alike.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include "moefuse/config.h"
#include "moefuse/dispatch.h"
#include "moefuse/layer.h"
#include "moefuse/router.h"
#include "moefuse/tensor.h"

namespace moefuse::layer {

template <class Views>
void route_tokens(cublasHandle_t cublas, const MoeConfig& c, const TensorView& x,
                  const MoeLayerWeights& w, const Views& v, const TensorView& losses,
                  const TensorView& health, cudaStream_t stream) {
  router_logits(cublas, x, w.w_router, v.logits, v.router_gemm, stream);
  router_topk(c.router, c.top_k, v.logits, w.score_bias,
              RouterOutputs{.expert_idx = v.expert_idx,
                            .probs = v.probs,
                            .counts = v.counts,
                            .aux_f = v.aux_f,
                            .aux_P = v.aux_P,
                            .losses = losses},
              health, v.router_topk, stream);
}

template <class Views>
void build_dispatch_maps(const MoeConfig& c, const Views& v, const TensorView& health,
                         cudaStream_t stream) {
  dispatch_maps(
      v.expert_idx, c.num_experts, 1,
      DispatchMaps{.offsets = v.offsets, .row_of = v.row_of, .token_of_row = v.token_of_row},
      health, v.maps, stream);
}

}  // namespace moefuse::layer
