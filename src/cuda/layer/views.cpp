#include "cuda/layer/views.h"

#include <algorithm>

#include "cuda/layer/ops.h"
#include "moefuse/grouped_gemm_backward.h"
#include "moefuse/grouped_gemm_fp8.h"
#include "moefuse/grouped_gemm_fp8_dgrad.h"
#include "moefuse/grouped_gemm_fp8_wgrad.h"

namespace moefuse::layer {

namespace {

// The shared expert's FP8 views (absent slices stay empty): T tokens, H hidden, its sF, s_fc1.
SharedExpertFp8 shared_fp8_views(const SharedFp8Slices& s, const Regions& regions, int64_t T,
                                 int64_t H, int64_t sF, int64_t s_fc1) {
  auto v = [&](const Slice& slice, DType dtype, std::initializer_list<int64_t> shape) {
    return slice_view(slice, regions, dtype, shape);
  };
  const DType f32 = DType::kFloat32, e4m3 = DType::kFloat8E4M3;
  const int64_t gH = fp8_scale_groups(H), gF = fp8_scale_groups(sF), g1 = fp8_scale_groups(s_fc1);
  const int64_t cols = fp8_scale_rows(T), G = fp8_colwise_groups(T, 1);
  const int64_t cols_t = kFp8ScaleGroup * G;
  return SharedExpertFp8{
      .x = v(s.x, e4m3, {T, H}),
      .x_scales = v(s.x_scales, f32, {gH, cols}),
      .act = v(s.act, e4m3, {T, sF}),
      .act_scales = v(s.act_scales, f32, {gF, cols}),
      .scales_rows = v(s.scales_rows, f32, {T, gH}),
      .x_bwd = v(s.x_bwd, e4m3, {T, H}),
      .x_scales_bwd = v(s.x_scales_bwd, f32, {gH, cols}),
      .dy = v(s.dy, e4m3, {T, H}),
      .dy_scales = v(s.dy_scales, f32, {gH, cols}),
      .dpre = v(s.dpre, e4m3, {T, s_fc1}),
      .dpre_scales = v(s.dpre_scales, f32, {g1, cols}),
      // the quantiser's row-major scales of each operand in turn: [T, groups] of the widest
      .scales_rows_bwd = v(s.scales_rows_bwd, f32, {T, std::max(gH, g1)}),
      .dy_t = v(s.dy_t, e4m3, {H, cols_t}),
      .dy_t_scales = v(s.dy_t_scales, f32, {G, H}),
      .act_t = v(s.act_t, e4m3, {sF, cols_t}),
      .act_t_scales = v(s.act_t_scales, f32, {G, sF}),
      .dpre_t = v(s.dpre_t, e4m3, {s_fc1, cols_t}),
      .dpre_t_scales = v(s.dpre_t_scales, f32, {G, s_fc1}),
      .x_t = v(s.x_t, e4m3, {H, cols_t}),
      .x_t_scales = v(s.x_t_scales, f32, {G, H}),
      .weights = {.w1 = v(s.w1, e4m3, {1, s_fc1, H}),
                  .w1_scales = v(s.w1_scales, f32, {1, g1, gH}),
                  .w2 = v(s.w2, e4m3, {1, H, sF}),
                  .w2_scales = v(s.w2_scales, f32, {1, gH, gF}),
                  .w1t = v(s.w1t, e4m3, {1, H, s_fc1}),
                  .w1t_scales = v(s.w1t_scales, f32, {1, gH, g1}),
                  .w2t = v(s.w2t, e4m3, {1, sF, H}),
                  .w2t_scales = v(s.w2t_scales, f32, {1, gF, gH})},
  };
}

}  // namespace

Views make_views(const MoeConfig& c, const Plan& p, const Regions& regions) {
  const int64_t T = p.tokens, R = p.rows, E = c.num_experts, k = c.top_k, H = c.hidden,
                F = c.ffn, fc1 = c.fc1_width();
  const MoeConfig sc = shared_expert_config(c);
  const int64_t sF = sc.ffn, s_fc1 = sc.fc1_width();
  auto v = [&](const Slice& s, DType dtype, std::initializer_list<int64_t> shape) {
    return slice_view(s, regions, dtype, shape);
  };
  auto ws = [&](const Slice& s) {
    return Workspace{.data = slice_ptr(s, regions), .bytes = s.bytes};
  };
  const DType f32 = DType::kFloat32, i32 = DType::kInt32, bf = DType::kBFloat16,
              e4m3 = DType::kFloat8E4M3;
  const int64_t gH = fp8_scale_groups(H), gF = fp8_scale_groups(F), gfc1 = fp8_scale_groups(fc1);
  const int64_t scale_cols = fp8_scale_rows(R);
  const bool unfused = p.mode == LayerMode::kUnfused;
  const bool fp8 = c.precision == PrecisionRecipe::kFP8Blockwise;
  const int64_t G = fp8_colwise_groups(R, E), cols_t = kFp8ScaleGroup * G;
  const int64_t units = fc2_dgrad_d_b2_units(R, E);
  return Views{
      .logits = v(p.logits, f32, {T, E}),
      .expert_idx = v(p.expert_idx, i32, {T, k}),
      .probs = v(p.probs, f32, {T, k}),
      .counts = v(p.counts, i32, {E}),
      .offsets = v(p.offsets, i32, {E + 1}),
      .row_of = v(p.row_of, i32, {T, k}),
      .token_of_row = v(p.token_of_row, i32, {R}),
      .row_prob = v(p.row_prob, f32, {R}),
      .shared_offsets = v(p.shared_offsets, i32, {2}),
      .pre = v(p.pre, bf, {R, fc1}),
      .shared_pre = v(p.shared_pre, bf, {T, s_fc1}),
      .router_gemm = ws(p.router_gemm),
      .router_topk = ws(p.router_topk),
      .maps = ws(p.maps),
      .aux_f = v(p.aux_f, f32, {E}),
      .aux_P = v(p.aux_P, f32, {E}),
      .xs = v(p.xs, bf, {R, H}),
      .act = v(p.act, bf, {R, F}),
      .ys = v(p.ys, bf, {R, H}),
      .shared_act = v(p.shared_act, bf, {T, sF}),
      .shared_y = v(p.shared_y, bf, {T, H}),
      .x_qdq = v(p.x_qdq, bf, {T, H}),
      .xs_fp8 = v(p.xs_fp8, e4m3, {R, H}),
      .xs_scales = v(p.xs_scales, f32, {gH, scale_cols}),
      .act_fp8 = v(p.act_fp8, e4m3, {R, F}),
      .act_scales = v(p.act_scales, f32, {gF, scale_cols}),
      .fp8_weights = {.w1 = v(p.w1_fp8, e4m3, {E, fc1, H}),
                      .w1_scales = v(p.w1_scales, f32, {E, gfc1, gH}),
                      .w2 = v(p.w2_fp8, e4m3, {E, H, F}),
                      .w2_scales = v(p.w2_scales, f32, {E, gH, gF}),
                      .w1t = v(p.w1t_fp8, e4m3, {E, H, fc1}),
                      .w1t_scales = v(p.w1t_scales, f32, {E, gH, gfc1}),
                      .w2t = v(p.w2t_fp8, e4m3, {E, F, H}),
                      .w2t_scales = v(p.w2t_scales, f32, {E, gF, gH})},
      .w1_qdq = v(p.w1_qdq, bf, {E, fc1, H}),
      .w2_qdq = v(p.w2_qdq, bf, {E, H, F}),
      .w1_qdq_dgrad = v(p.w1_qdq_dgrad, bf, {E, fc1, H}),
      .w2_qdq_dgrad = v(p.w2_qdq_dgrad, bf, {E, H, F}),
      .pre_bwd = v(p.pre_bwd, bf, {R, fc1}),
      .shared_pre_bwd = v(p.shared_pre_bwd, bf, {T, s_fc1}),
      .dys = v(p.dys, bf, {R, H}),
      .dpre = v(p.dpre, bf, {R, fc1}),
      .act_bwd = v(p.act_bwd, bf, {R, F}),
      .d_row_prob = v(p.d_row_prob, f32, {R}),
      .dp_partial = unfused ? TensorView{}
                            : v(p.dp_scratch, f32,
                                {R, fp8 ? fc2_dgrad_fp8_dp_blocks(F) : fc2_dgrad_dp_blocks(F)}),
      .bias_partial = v(p.bias_partial, f32, {fc2_dgrad_bias_pieces(H), R}),
      .g = unfused ? v(p.dp_scratch, bf, {R, F}) : TensorView{},
      .d_probs = v(p.d_probs, f32, {T, k}),
      .dxs = v(p.dxs, bf, {R, H}),
      .d_logits = v(p.d_logits, f32, {T, E}),
      .xs_bwd = v(p.xs_bwd, bf, {R, H}),
      .shared_dpre = v(p.shared_dpre, bf, {T, s_fc1}),
      .shared_act_bwd = v(p.shared_act_bwd, bf, {T, sF}),
      .shared_dx = v(p.shared_dx, bf, {T, H}),
      .shared_g = v(p.shared_g, bf, {T, sF}),
      .d_b2_units = v(p.bias_units, f32, {units, H}),
      .d_b1_units = v(p.bias_units, f32, {units, fc1}),
      .dys_fp8 = v(p.dys_fp8, e4m3, {R, H}),
      .dys_scales = v(p.dys_scales, f32, {gH, scale_cols}),
      .dpre_fp8 = v(p.dpre_fp8, e4m3, {R, fc1}),
      .dpre_scales_rows = v(p.dpre_scales_rows, f32, {R, gfc1}),
      .dpre_scales = v(p.dpre_scales, f32, {gfc1, scale_cols}),
      .dys_t = v(p.dys_t, e4m3, {H, cols_t}),
      .dys_t_scales = v(p.dys_t_scales, f32, {G, H}),
      .act_t = v(p.act_t, e4m3, {F, cols_t}),
      .act_t_scales = v(p.act_t_scales, f32, {G, F}),
      .dpre_t = v(p.dpre_t, e4m3, {fc1, cols_t}),
      .dpre_t_scales = v(p.dpre_t_scales, f32, {G, fc1}),
      .xs_t = v(p.xs_t, e4m3, {H, cols_t}),
      .xs_t_scales = v(p.xs_t_scales, f32, {G, H}),
      .xs_fp8_bwd = v(p.xs_fp8_bwd, e4m3, {R, H}),
      .xs_scales_bwd = v(p.xs_scales_bwd, f32, {gH, scale_cols}),
      .dys_qdq = v(p.dys_qdq, bf, {R, H}),
      .dpre_qdq = v(p.dpre_qdq, bf, {R, fc1}),
      .xs_qdq_bwd = v(p.xs_qdq_bwd, bf, {R, H}),
      .shared_fp8 = shared_fp8_views(p.shared_fp8, regions, T, H, sF, s_fc1),
  };
}

}  // namespace moefuse::layer
