// The expert-parallel layer's memory plan (EpMoeLayer, moefuse/ep_layer.h): where each buffer lives
// in the caller's cache and workspace, and the typed views over them. The one-GPU layer's plan
// (cuda/layer/plan.h) with the rows split in two:
//   - this rank's own tokens, T of them, R = T·k rows: routing, the permuted xs it sends, the dys
//     it sends back and the expert outputs returned to it (these three sized for S = max tokens
//     per rank·k, the transport's fixed bound, rows past R padding);
//   - the rows this rank's experts receive, at most C = plan.receive_capacity_rows (the worst case
//     unless the caller bounded it): FC1, FC2 and their backward run over them.
// The cache keeps what the backward reads that a later call of the transport would overwrite: the
// received rows (dW1's operand) and the returned expert outputs (d_probs' operand), besides the
// one-GPU layer's routing metadata and FC1's pre-activation. Pure host arithmetic, tested on the
// CPU (tests/cpu/ep_layer_plan_test.cpp).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "cuda/layer/plan.h"
#include "dist/ep_plan.h"
#include "moefuse/config.h"
#include "moefuse/layer.h"
#include "moefuse/tensor.h"

namespace moefuse::dist {

struct EpLayerPlan {
  int64_t tokens = 0;     // T, this rank's
  int64_t rows = 0;       // R = T·k, this rank's permuted rows
  int64_t send_rows = 0;  // S = max tokens per rank·k: the rows of xs and dys
  int64_t capacity = 0;   // C, rows this rank's experts may receive
  int64_t local_experts = 0;

  // cache
  layer::Slice logits, expert_idx, probs, counts, offsets, row_of, token_of_row;
  layer::Slice xs_received, pre, ys_returned;
  layer::Slice shared_offsets, shared_pre;
  // workspace, both passes
  layer::Slice router_gemm, router_topk, maps, aux_f, aux_P;
  // forward scratch
  layer::Slice xs, act, ys, shared_act, shared_y;
  // backward scratch
  layer::Slice dys, d_probs, d_logits, dpre, act_bwd, dxs;
  layer::Slice shared_dpre, shared_act_bwd, shared_dx;
  // expert_bias: the bias sums' per-unit scratch [fc2_dgrad_d_b2_units(C, local experts),
  // max(H, fc1)] fp32, for d_b2 and then d_b1 on the second stream
  layer::Slice bias_units;

  size_t cache_bytes = 0;
  size_t workspace_bytes = 0;
  std::vector<LayerBuffer> buffers;
};

// For T tokens on `plan`'s rank (T ≤ plan's max tokens per rank is the caller's to check).
EpLayerPlan make_ep_layer_plan(const MoeConfig& config, const EpPlan& plan, int64_t tokens);

struct EpLayerViews {
  TensorView logits, expert_idx, probs, counts, offsets, row_of, token_of_row;
  TensorView xs_received, pre, ys_returned, shared_offsets, shared_pre;
  Workspace router_gemm, router_topk, maps;
  TensorView aux_f, aux_P;
  TensorView xs, act, ys, shared_act, shared_y;
  TensorView dys, d_probs, d_logits, dpre, act_bwd, dxs, shared_dpre, shared_act_bwd, shared_dx;
  TensorView d_b2_units, d_b1_units;  // one slice, used in turn
};

EpLayerViews make_ep_layer_views(const MoeConfig& config, const EpLayerPlan& plan,
                                 Workspace cache, Workspace workspace);

}  // namespace moefuse::dist
