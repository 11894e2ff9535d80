#include "dist/ep_layer_plan.h"

#include <algorithm>

#include "cuda/layer/carver.h"
#include "cuda/layer/routing_plan.h"
#include "moefuse/grouped_gemm_backward.h"

namespace moefuse::dist {

EpLayerPlan make_ep_layer_plan(const MoeConfig& c, const EpPlan& plan, int64_t tokens) {
  EpLayerPlan p;
  const size_t T = static_cast<size_t>(tokens), E = static_cast<size_t>(c.num_experts),
               k = static_cast<size_t>(c.top_k), H = static_cast<size_t>(c.hidden),
               F = static_cast<size_t>(c.ffn), fc1 = static_cast<size_t>(c.fc1_width());
  // The rows sent and returned (xs, dys, ys_returned, token_of_row) are the transport's fixed
  // S = max tokens·k, not this call's R = T·k: its bound on every rank's offsets is S, the same
  // on all ranks. Rows past R are padding (token -1).
  const size_t R = T * k, C = static_cast<size_t>(plan.receive_capacity_rows),
               S = static_cast<size_t>(plan.send_rows);
  p.tokens = tokens;
  p.rows = static_cast<int64_t>(R);
  p.capacity = plan.receive_capacity_rows;
  p.send_rows = plan.send_rows;
  p.local_experts = plan.experts_per_rank;
  const bool shared = c.shared_expert_ffn > 0;
  const MoeConfig sc = shared_expert_config(c);
  const size_t sF = static_cast<size_t>(c.shared_expert_ffn);
  const size_t s_fc1 = shared ? static_cast<size_t>(sc.fc1_width()) : 0;
  constexpr size_t bf = 2, f32 = 4, i32 = 4;
  using layer::Carver;

  Carver cache(LayerRegion::kCache, 0, &p.buffers);
  layer::carve_routing_cache(cache, p, T, E, k);
  p.token_of_row = cache.add("token_of_row [S] int32", S * i32);
  p.xs_received = cache.add("xs_received [C,H] bf16 (dW1's rows)", C * H * bf);
  p.pre = cache.add("pre [C,fc1] bf16", C * fc1 * bf);
  p.ys_returned = cache.add("ys_returned [S,H] bf16 (d_probs' rows)", S * H * bf);
  if (shared) {
    p.shared_offsets = cache.add("shared_offsets [2] int32", 2 * i32);
    p.shared_pre = cache.add("shared_pre [T,shared_fc1] bf16", T * s_fc1 * bf);
  }
  p.cache_bytes = cache.end();

  Carver common(LayerRegion::kWorkspaceBoth, 0, &p.buffers);
  layer::carve_routing_workspace(common, p, tokens, c.num_experts);

  Carver fwd(LayerRegion::kWorkspaceForward, common.end(), &p.buffers);
  p.xs = fwd.add("xs [S,H] bf16 (permute, sent)", S * H * bf);
  p.act = fwd.add("act [C,F] bf16", C * F * bf);
  p.ys = fwd.add("ys [C,H] bf16 (returned)", C * H * bf);
  if (shared) {
    p.shared_act = fwd.add("shared_act [T,shared_F] bf16", T * sF * bf);
    p.shared_y = fwd.add("shared_y [T,H] bf16", T * H * bf);
  }

  Carver bwd(LayerRegion::kWorkspaceBackward, common.end(), &p.buffers);
  p.dys = bwd.add("dys [S,H] bf16 (sent)", S * H * bf);
  p.d_probs = bwd.add("d_probs [T,k] fp32", R * f32);
  p.d_logits = bwd.add("d_logits [T,E] fp32", T * E * f32);
  p.dpre = bwd.add("d_pre [C,fc1] bf16", C * fc1 * bf);
  p.act_bwd = bwd.add("act [C,F] bf16 (dW2's rows)", C * F * bf);
  p.dxs = bwd.add("dxs [C,H] bf16 (returned)", C * H * bf);
  if (shared) {
    p.shared_dpre = bwd.add("shared_d_pre [T,shared_fc1] bf16", T * s_fc1 * bf);
    p.shared_act_bwd = bwd.add("shared_act [T,shared_F] bf16", T * sF * bf);
    p.shared_dx = bwd.add("shared_dx [T,H] bf16", T * H * bf);
  }
  if (c.expert_bias)
    p.bias_units = bwd.add("bias_units [units,max(H,fc1)] fp32 (bias sums)",
                           static_cast<size_t>(fc2_dgrad_d_b2_units(p.capacity, p.local_experts)) *
                               std::max(H, fc1) * f32);
  p.workspace_bytes = std::max(fwd.end(), bwd.end());
  return p;
}

EpLayerViews make_ep_layer_views(const MoeConfig& c, const EpLayerPlan& p, Workspace cache,
                                 Workspace workspace) {
  const int64_t T = p.tokens, C = p.capacity, S = p.send_rows, E = c.num_experts, k = c.top_k,
                H = c.hidden, F = c.ffn, fc1 = c.fc1_width();
  const MoeConfig sc = shared_expert_config(c);
  const int64_t sF = sc.ffn, s_fc1 = sc.fc1_width();
  const int64_t units = fc2_dgrad_d_b2_units(C, p.local_experts);
  const layer::Regions regions{.cache = cache, .workspace = workspace, .fp8 = {}};
  auto v = [&](const layer::Slice& s, DType dtype, std::initializer_list<int64_t> shape) {
    return layer::slice_view(s, regions, dtype, shape);
  };
  auto ws = [&](const layer::Slice& s) {
    return Workspace{.data = layer::slice_ptr(s, regions), .bytes = s.bytes};
  };
  const DType f32 = DType::kFloat32, i32 = DType::kInt32, bf = DType::kBFloat16;
  return EpLayerViews{
      .logits = v(p.logits, f32, {T, E}),
      .expert_idx = v(p.expert_idx, i32, {T, k}),
      .probs = v(p.probs, f32, {T, k}),
      .counts = v(p.counts, i32, {E}),
      .offsets = v(p.offsets, i32, {E + 1}),
      .row_of = v(p.row_of, i32, {T, k}),
      .token_of_row = v(p.token_of_row, i32, {S}),
      .xs_received = v(p.xs_received, bf, {C, H}),
      .pre = v(p.pre, bf, {C, fc1}),
      .ys_returned = v(p.ys_returned, bf, {S, H}),
      .shared_offsets = v(p.shared_offsets, i32, {2}),
      .shared_pre = v(p.shared_pre, bf, {T, s_fc1}),
      .router_gemm = ws(p.router_gemm),
      .router_topk = ws(p.router_topk),
      .maps = ws(p.maps),
      .aux_f = v(p.aux_f, f32, {E}),
      .aux_P = v(p.aux_P, f32, {E}),
      .xs = v(p.xs, bf, {S, H}),
      .act = v(p.act, bf, {C, F}),
      .ys = v(p.ys, bf, {C, H}),
      .shared_act = v(p.shared_act, bf, {T, sF}),
      .shared_y = v(p.shared_y, bf, {T, H}),
      .dys = v(p.dys, bf, {S, H}),
      .d_probs = v(p.d_probs, f32, {T, k}),
      .d_logits = v(p.d_logits, f32, {T, E}),
      .dpre = v(p.dpre, bf, {C, fc1}),
      .act_bwd = v(p.act_bwd, bf, {C, F}),
      .dxs = v(p.dxs, bf, {C, H}),
      .shared_dpre = v(p.shared_dpre, bf, {T, s_fc1}),
      .shared_act_bwd = v(p.shared_act_bwd, bf, {T, sF}),
      .shared_dx = v(p.shared_dx, bf, {T, H}),
      .d_b2_units = v(p.bias_units, f32, {units, H}),
      .d_b1_units = v(p.bias_units, f32, {units, fc1}),
  };
}

}  // namespace moefuse::dist
