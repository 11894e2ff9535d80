// The routing buffers both memory plans carve alike and in the same order: the one-GPU layer's
// (plan.cpp) and the expert-parallel layer's (dist/ep_layer_plan.cpp). `Plan` is either plan,
// which name these buffers alike (as routing.h's `Views` do).
#pragma once

#include <cstddef>
#include <cstdint>

#include "cuda/layer/carver.h"
#include "moefuse/dispatch.h"
#include "moefuse/router.h"

namespace moefuse::layer {

// The router's outputs, cached for the backward (the call's own T tokens, R = T·k rows).
template <class Plan>
void carve_routing_cache(Carver& cache, Plan& p, size_t tokens, size_t experts, size_t top_k) {
  constexpr size_t f32 = 4, i32 = 4;
  const size_t R = tokens * top_k;
  p.logits = cache.add("logits [T,E] fp32", tokens * experts * f32);
  p.expert_idx = cache.add("expert_idx [T,k] int32", R * i32);
  p.probs = cache.add("probs [T,k] fp32", R * f32);
  p.counts = cache.add("counts [E] int32", experts * i32);
  p.offsets = cache.add("offsets [E+1] int32", (experts + 1) * i32);
  p.row_of = cache.add("row_of [T,k] int32", R * i32);
}

// The router's and the dispatch maps' workspaces and the aux statistics, used by both passes.
// The backward's logits workspace (cuBLAS's plus the bf16 d_logits) covers the forward's.
template <class Plan>
void carve_routing_workspace(Carver& common, Plan& p, int64_t tokens, int num_experts) {
  constexpr size_t f32 = 4;
  const size_t E = static_cast<size_t>(num_experts);
  p.router_gemm = common.add("router cuBLAS workspace",
                             router_logits_backward_workspace_size(tokens, num_experts));
  p.router_topk =
      common.add("router_topk workspace", router_topk_workspace_size(tokens, num_experts));
  p.maps = common.add("dispatch_maps workspace", dispatch_maps_workspace_size(tokens, num_experts));
  p.aux_f = common.add("aux_f [E] fp32", E * f32);
  p.aux_P = common.add("aux_P [E] fp32", E * f32);
}

}  // namespace moefuse::layer
