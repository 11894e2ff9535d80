#include "cuda/layer/plan.h"

#include <algorithm>
#include <string>

#include "cuda/layer/carver.h"
#include "cuda/layer/routing_plan.h"
#include "cuda/layer/ops.h"
#include "moefuse/dispatch.h"
#include "moefuse/grouped_gemm_fp8.h"
#include "moefuse/grouped_gemm_fp8_dgrad.h"
#include "moefuse/grouped_gemm_fp8_wgrad.h"
#include "moefuse/grouped_gemm_backward.h"
#include "moefuse/router.h"

namespace moefuse::layer {
namespace {

constexpr size_t kF32 = 4, kE4m3 = 1;

size_t groups(size_t extent) {
  return static_cast<size_t>(fp8_scale_groups(static_cast<int64_t>(extent)));
}

// The shared expert's FP8 buffers (SharedFp8Slices) for T tokens, H hidden, its sF and s_fc1.
// Forward: x quantised for FC1, FC1's E4M3 act for FC2.
void carve_shared_fp8_forward(Carver& fwd, SharedFp8Slices& s, size_t T, size_t H, size_t sF) {
  const size_t cols = static_cast<size_t>(fp8_scale_rows(static_cast<int64_t>(T)));
  s.x = fwd.add("shared_x [T,H] e4m3", T * H * kE4m3);
  s.x_scales = fwd.add("shared_x_scales [H/128,T] fp32 (K-major)", groups(H) * cols * kF32);
  s.act = fwd.add("shared_act [T,shared_F] e4m3", T * sF * kE4m3);
  s.act_scales =
      fwd.add("shared_act_scales [shared_F/128,T] fp32 (K-major)", groups(sF) * cols * kF32);
  s.scales_rows = fwd.add("shared_scales_rows [T,H/128] fp32 (row-major)", T * groups(H) * kF32);
}

// Backward: the dgrads' row-wise operands (dy, d_pre), x again with recompute_pre, and the
// wgrads' column-wise ones (one 128-row group per 128 tokens: a single expert).
void carve_shared_fp8_backward(Carver& bwd, SharedFp8Slices& s, size_t T, size_t H, size_t sF,
                               size_t s_fc1, bool recompute, bool fp8_wgrad) {
  const size_t cols = static_cast<size_t>(fp8_scale_rows(static_cast<int64_t>(T)));
  if (recompute) {
    s.x_bwd = bwd.add("shared_x [T,H] e4m3 (fp8 recompute)", T * H * kE4m3);
    s.x_scales_bwd = bwd.add("shared_x_scales [H/128,T] fp32 (K-major, fp8 recompute)",
                             groups(H) * cols * kF32);
  }
  s.dy = bwd.add("shared_dy [T,H] e4m3", T * H * kE4m3);
  s.dy_scales = bwd.add("shared_dy_scales [H/128,T] fp32 (K-major)", groups(H) * cols * kF32);
  s.dpre = bwd.add("shared_d_pre [T,shared_fc1] e4m3", T * s_fc1 * kE4m3);
  s.dpre_scales = bwd.add("shared_d_pre_scales [shared_fc1/128,T] fp32 (K-major)",
                          groups(s_fc1) * cols * kF32);
  // The row-wise passes' row-major scale scratch: the recompute's, and dy's and d_pre's where no
  // column-wise pass (FP8 wgrads) writes their K-major scales directly.
  if (recompute || !fp8_wgrad)
    s.scales_rows_bwd = bwd.add("shared_scales_rows [T,max(H,shared_fc1)/128] fp32 (row-major)",
                                T * std::max(groups(H), groups(s_fc1)) * kF32);
  if (!fp8_wgrad) return;
  const size_t G = static_cast<size_t>(fp8_colwise_groups(static_cast<int64_t>(T), 1));
  s.dy_t = bwd.add("shared_dy_t [H,128G] e4m3 (column-wise)", H * 128 * G * kE4m3);
  s.dy_t_scales = bwd.add("shared_dy_t_scales [G,H] fp32", G * H * kF32);
  s.act_t = bwd.add("shared_act_t [shared_F,128G] e4m3 (column-wise)", sF * 128 * G * kE4m3);
  s.act_t_scales = bwd.add("shared_act_t_scales [G,shared_F] fp32", G * sF * kF32);
  s.dpre_t =
      bwd.add("shared_d_pre_t [shared_fc1,128G] e4m3 (column-wise)", s_fc1 * 128 * G * kE4m3);
  s.dpre_t_scales = bwd.add("shared_d_pre_t_scales [G,shared_fc1] fp32", G * s_fc1 * kF32);
  s.x_t = bwd.add("shared_x_t [H,128G] e4m3 (column-wise)", H * 128 * G * kE4m3);
  s.x_t_scales = bwd.add("shared_x_t_scales [G,H] fp32", G * H * kF32);
}

// The weight region: w1 [1,s_fc1,H] and w2 [1,H,sF] as the routed experts' (128x128 blocks),
// and their transposes.
void carve_shared_fp8_weights(Carver& w, SharedFp8Slices& s, size_t H, size_t sF, size_t s_fc1) {
  const size_t gH = groups(H), gF = groups(sF), g1 = groups(s_fc1);
  s.w1 = w.add("shared_w1 [1,shared_fc1,H] e4m3", s_fc1 * H * kE4m3);
  s.w1_scales = w.add("shared_w1_scales [1,shared_fc1/128,H/128] fp32", g1 * gH * kF32);
  s.w2 = w.add("shared_w2 [1,H,shared_F] e4m3", H * sF * kE4m3);
  s.w2_scales = w.add("shared_w2_scales [1,H/128,shared_F/128] fp32", gH * gF * kF32);
  s.w1t = w.add("shared_w1t [1,H,shared_fc1] e4m3", H * s_fc1 * kE4m3);
  s.w1t_scales = w.add("shared_w1t_scales [1,H/128,shared_fc1/128] fp32", gH * g1 * kF32);
  s.w2t = w.add("shared_w2t [1,shared_F,H] e4m3", sF * H * kE4m3);
  s.w2t_scales = w.add("shared_w2t_scales [1,shared_F/128,H/128] fp32", gF * gH * kF32);
}

}  // namespace

Plan make_plan(const MoeConfig& c, const LayerOptions& o, int64_t tokens) {
  Plan p;
  const size_t T = static_cast<size_t>(tokens), E = static_cast<size_t>(c.num_experts),
               k = static_cast<size_t>(c.top_k), H = static_cast<size_t>(c.hidden),
               F = static_cast<size_t>(c.ffn), fc1 = static_cast<size_t>(c.fc1_width());
  const size_t R = T * k;
  p.tokens = tokens;
  p.rows = static_cast<int64_t>(R);
  p.mode = o.mode;
  const bool shared = c.shared_expert_ffn > 0;
  const MoeConfig sc = shared_expert_config(c);
  const size_t sF = static_cast<size_t>(c.shared_expert_ffn);
  const size_t s_fc1 = shared ? static_cast<size_t>(sc.fc1_width()) : 0;
  const bool unfused = o.mode == LayerMode::kUnfused;
  // The fused forward writes pre only to cache it; the unfused one always needs it (the plain
  // FC1 GEMM's output, the activation kernel's input).
  const bool cache_pre = !recomputes_pre(c, o);
  const bool fp8 = c.precision == PrecisionRecipe::kFP8Blockwise;
  const bool mx = c.precision == PrecisionRecipe::kMXFP8;
  constexpr size_t bf = 2, f32 = 4, i32 = 4, e4m3 = 1;
  const size_t scale_cols = static_cast<size_t>(fp8_scale_rows(static_cast<int64_t>(R)));

  Carver cache(LayerRegion::kCache, 0, &p.buffers);
  carve_routing_cache(cache, p, T, E, k);
  p.token_of_row = cache.add("token_of_row [R] int32", R * i32);
  p.row_prob = cache.add("row_prob [R] fp32", R * f32);
  if (shared) p.shared_offsets = cache.add("shared_offsets [2] int32", 2 * i32);
  if (cache_pre) p.pre = cache.add("pre [R,fc1] bf16", R * fc1 * bf);
  if (cache_pre && shared) p.shared_pre = cache.add("shared_pre [T,shared_fc1] bf16",
                                                    T * s_fc1 * bf);
  p.cache_bytes = cache.end();

  Carver common(LayerRegion::kWorkspaceBoth, 0, &p.buffers);
  carve_routing_workspace(common, p, tokens, c.num_experts);

  Carver fwd(LayerRegion::kWorkspaceForward, common.end(), &p.buffers);
  // bf16: FC1 reads a permuted copy of x unless it gathers the rows itself (fc1_gathers_x).
  if (mx) p.x_qdq = fwd.add("x_qdq [T,H] bf16 (MXFP8 along H)", T * H * bf);
  if (!fp8 && !fc1_gathers_x(c, o)) p.xs = fwd.add("xs [R,H] bf16 (permute)", R * H * bf);
  if (!cache_pre && unfused) p.pre = fwd.add("pre [R,fc1] bf16 (unfused FC1)", R * fc1 * bf);
  if (fp8) {
    p.xs_fp8 = fwd.add("xs [R,H] e4m3", R * H * e4m3);
    p.xs_scales = fwd.add("xs_scales [H/128,R] fp32 (K-major)", groups(H) * scale_cols * f32);
  }
  if (fp8) {  // FC1's epilogue writes act as FC2's E4M3 operand: no bf16 act
    p.act_fp8 = fwd.add("act [R,F] e4m3", R * F * e4m3);
    p.act_scales = fwd.add("act_scales [F/128,R] fp32 (K-major)", groups(F) * scale_cols * f32);
  } else {
    p.act = fwd.add("act [R,F] bf16", R * F * bf);
  }
  p.ys = fwd.add("ys [R,H] bf16", R * H * bf);
  if (shared) {
    if (!cache_pre && unfused)
      p.shared_pre = fwd.add("shared_pre [T,shared_fc1] bf16 (unfused)", T * s_fc1 * bf);
    if (fp8) carve_shared_fp8_forward(fwd, p.shared_fp8, T, H, sF);  // FC1 writes E4M3 act
    else p.shared_act = fwd.add("shared_act [T,shared_F] bf16", T * sF * bf);
    p.shared_y = fwd.add("shared_y [T,H] bf16", T * H * bf);
  }

  Carver bwd(LayerRegion::kWorkspaceBackward, common.end(), &p.buffers);
  p.pre_bwd = cache_pre ? p.pre : bwd.add("pre [R,fc1] bf16 (recomputed)", R * fc1 * bf);
  // FP8: the GEMMs' copies of dys are quantised from dy (backward_fp8.h); bf16 dys only for the
  // bias terms and the bf16 dW2.
  const bool fp8_wgrad = fp8 && !c.bf16_wgrad;
  if (!fp8 || c.expert_bias || c.bf16_wgrad) p.dys = bwd.add("dys [R,H] bf16", R * H * bf);
  p.dpre = bwd.add("d_pre [R,fc1] bf16", R * fc1 * bf);
  p.act_bwd = bwd.add("scaled_act [R,F] bf16", R * F * bf);
  p.d_row_prob = bwd.add("d_row_prob [R] fp32", R * f32);
  // Fused: the dp partial sums; unfused: the plain dgrad's g. One buffer serves either.
  const size_t dp_blocks = static_cast<size_t>(fp8 ? fc2_dgrad_fp8_dp_blocks(c.ffn)
                                                     : fc2_dgrad_dp_blocks(c.ffn));
  p.dp_scratch = unfused ? bwd.add("g [R,F] bf16 (unfused FC2 dgrad)", R * F * bf)
                         : bwd.add("dp_partial [R,blocks] fp32", R * dp_blocks * f32);
  if (fuses_bias_terms(c, o))
    p.bias_partial = bwd.add("bias_partial [pieces,R] fp32",
                             static_cast<size_t>(fc2_dgrad_bias_pieces(H)) * R * f32);
  if (c.expert_bias)
    p.bias_units = bwd.add(
        "bias_units [units,max(H,fc1)] fp32 (bias sums)",
        static_cast<size_t>(fc2_dgrad_d_b2_units(p.rows, c.num_experts)) * std::max(H, fc1) * f32);
  p.d_probs = bwd.add("d_probs [T,k] fp32", R * f32);
  p.dxs = bwd.add("dxs [R,H] bf16", R * H * bf);
  p.d_logits = bwd.add("d_logits [T,E] fp32", T * E * f32);
  // bf16 wgrads, both modes: dW1 reads a permuted copy of x, made by the recompute's permute or
  // by the wgrad's own gather (faster than the gather-fused wgrad on every preset, run 9).
  if (!fp8_wgrad)
    p.xs_bwd = bwd.add("xs [R,H] bf16 (dW1's x rows, and the recompute's)", R * H * bf);
  if (fp8 && !cache_pre) {
    // The recompute's xs codes and K-major scales (dW1's column-wise copy gathers x itself).
    p.xs_fp8_bwd = bwd.add("xs [R,H] e4m3 (fp8 recompute)", R * H * e4m3);
    p.xs_scales_bwd =
        bwd.add("xs_scales [H/128,R] fp32 (K-major, fp8 recompute)", groups(H) * scale_cols * f32);
  }
  if (fp8) {
    // Row-wise operands of the dgrads (K = H for FC2's, K = fc1 for FC1's).
    p.dys_fp8 = bwd.add("dys [R,H] e4m3", R * H * e4m3);
    p.dys_scales = bwd.add("dys_scales [H/128,R] fp32 (K-major)", groups(H) * scale_cols * f32);
    p.dpre_fp8 = bwd.add("d_pre [R,fc1] e4m3", R * fc1 * e4m3);
    // The row-major scales' scratch of the row-wise pass; with FP8 wgrads the pass that writes
    // d_pre's column-wise copy writes the K-major scales itself.
    if (!fp8_wgrad)
      p.dpre_scales_rows =
          bwd.add("d_pre_scales [R,fc1/128] fp32 (row-major)", R * groups(fc1) * f32);
    p.dpre_scales =
        bwd.add("d_pre_scales [fc1/128,R] fp32 (K-major)", groups(fc1) * scale_cols * f32);
  }
  if (fp8_wgrad) {
    // Column-wise grouped operands of the wgrads (K = an expert's rows, 128-row groups).
    const size_t G = static_cast<size_t>(
        fp8_colwise_groups(static_cast<int64_t>(R), static_cast<int64_t>(E)));
    p.dys_t = bwd.add("dys_t [H,128G] e4m3 (column-wise)", H * 128 * G * e4m3);
    p.dys_t_scales = bwd.add("dys_t_scales [G,H] fp32", G * H * f32);
    p.act_t = bwd.add("scaled_act_t [F,128G] e4m3 (column-wise)", F * 128 * G * e4m3);
    p.act_t_scales = bwd.add("scaled_act_t_scales [G,F] fp32", G * F * f32);
    p.dpre_t = bwd.add("d_pre_t [fc1,128G] e4m3 (column-wise)", fc1 * 128 * G * e4m3);
    p.dpre_t_scales = bwd.add("d_pre_t_scales [G,fc1] fp32", G * fc1 * f32);
    p.xs_t = bwd.add("xs_t [H,128G] e4m3 (column-wise)", H * 128 * G * e4m3);
    p.xs_t_scales = bwd.add("xs_t_scales [G,H] fp32", G * H * f32);
  }
  if (mx) {
    p.dys_qdq = bwd.add("dys_qdq [R,H] bf16 (MXFP8 along H)", R * H * bf);
    p.dpre_qdq = bwd.add("d_pre_qdq [R,fc1] bf16 (MXFP8 along fc1)", R * fc1 * bf);
    if (!cache_pre)
      p.xs_qdq_bwd = bwd.add("xs_qdq [R,H] bf16 (MXFP8 along H, recompute)", R * H * bf);
  }
  if (shared) {
    p.shared_pre_bwd = cache_pre ? p.shared_pre
                                 : bwd.add("shared_pre [T,shared_fc1] bf16 (recomputed)",
                                           T * s_fc1 * bf);
    p.shared_dpre = bwd.add("shared_d_pre [T,shared_fc1] bf16", T * s_fc1 * bf);
    p.shared_act_bwd = bwd.add("shared_act [T,shared_F] bf16", T * sF * bf);
    p.shared_dx = bwd.add("shared_dx [T,H] bf16", T * H * bf);
    if (unfused) p.shared_g = bwd.add("shared_g [T,shared_F] bf16 (unfused)", T * sF * bf);
    if (fp8) carve_shared_fp8_backward(bwd, p.shared_fp8, T, H, sF, s_fc1, !cache_pre, fp8_wgrad);
  }
  p.workspace_bytes = std::max(fwd.end(), bwd.end());

  if (fp8) {
    Carver weights(LayerRegion::kFp8Weights, 0, &p.buffers);
    p.w1_fp8 = weights.add("w1 [E,fc1,H] e4m3", E * fc1 * H * e4m3);
    p.w1_scales =
        weights.add("w1_scales [E,fc1/128,H/128] fp32", E * groups(fc1) * groups(H) * f32);
    p.w2_fp8 = weights.add("w2 [E,H,F] e4m3", E * H * F * e4m3);
    p.w2_scales = weights.add("w2_scales [E,H/128,F/128] fp32", E * groups(H) * groups(F) * f32);
    // The dgrads' K-major copies (FP8 wgmma has no transposed operand): the same blocks.
    p.w1t_fp8 = weights.add("w1t [E,H,fc1] e4m3", E * H * fc1 * e4m3);
    p.w1t_scales =
        weights.add("w1t_scales [E,H/128,fc1/128] fp32", E * groups(H) * groups(fc1) * f32);
    p.w2t_fp8 = weights.add("w2t [E,F,H] e4m3", E * F * H * e4m3);
    p.w2t_scales = weights.add("w2t_scales [E,F/128,H/128] fp32", E * groups(F) * groups(H) * f32);
    if (shared) carve_shared_fp8_weights(weights, p.shared_fp8, H, sF, s_fc1);
    p.fp8_weight_bytes = weights.end();
  }
  if (mx) {
    Carver weights(LayerRegion::kFp8Weights, 0, &p.buffers);
    p.w1_qdq = weights.add("w1_qdq [E,fc1,H] bf16 (MXFP8 along H)", E * fc1 * H * bf);
    p.w2_qdq = weights.add("w2_qdq [E,H,F] bf16 (MXFP8 along F)", E * H * F * bf);
    p.w1_qdq_dgrad =
        weights.add("w1_qdq_dgrad [E,fc1,H] bf16 (MXFP8 along fc1)", E * fc1 * H * bf);
    p.w2_qdq_dgrad = weights.add("w2_qdq_dgrad [E,H,F] bf16 (MXFP8 along H)", E * H * F * bf);
    p.fp8_weight_bytes = weights.end();
  }
  return p;
}

void* slice_ptr(const Slice& s, const Regions& r) {
  auto at = [&](const Workspace& w) { return static_cast<unsigned char*>(w.data) + s.offset; };
  switch (s.region) {
    case Region::kCache: return at(r.cache);
    case Region::kWorkspace: return at(r.workspace);
    case Region::kFp8Weights: return at(r.fp8);
    case Region::kNone: break;
  }
  return nullptr;
}

TensorView slice_view(const Slice& s, const Regions& regions, DType dtype,
                      std::initializer_list<int64_t> shape) {
  if (!s.present()) return TensorView{};
  return TensorView::contiguous(slice_ptr(s, regions), dtype, shape, Device::kCuda);
}

}  // namespace moefuse::layer
