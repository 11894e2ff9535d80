// The plan's slices as typed tensor views over the caller's cache and workspace: what forward
// and backward hand to the ops. Absent slices are empty views (the ops' "absent").
#pragma once

#include "cuda/layer/fp8_mlp.h"
#include "cuda/layer/plan.h"
#include "cuda/layer/shared_expert.h"
#include "moefuse/config.h"
#include "moefuse/tensor.h"
#include "moefuse/workspace.h"

namespace moefuse::layer {

struct Views {
  // cache
  TensorView logits, expert_idx, probs, counts, offsets, row_of, token_of_row, row_prob;
  TensorView shared_offsets, pre, shared_pre;
  // workspace
  Workspace router_gemm, router_topk, maps;
  TensorView aux_f, aux_P;
  TensorView xs, act, ys, shared_act, shared_y, x_qdq;
  TensorView xs_fp8, xs_scales, act_fp8, act_scales;    // FP8 forward scratch
  Fp8MlpWeights fp8_weights;                            // FP8 weight region
  TensorView w1_qdq, w2_qdq, w1_qdq_dgrad, w2_qdq_dgrad;  // MXFP8 weight region
  TensorView pre_bwd, shared_pre_bwd, dys, dpre, act_bwd, d_row_prob, dp_partial, bias_partial, g,
      d_probs, dxs, d_logits, xs_bwd, shared_dpre, shared_act_bwd, shared_dx, shared_g;
  TensorView d_b2_units, d_b1_units;  // the bias sums' scratch (one slice, used in turn)
  // FP8 backward scratch (plan.h): row-wise dgrad operands, column-wise wgrad operands, and the
  // recompute's xs codes and scales
  TensorView dys_fp8, dys_scales, dpre_fp8, dpre_scales_rows, dpre_scales;
  TensorView dys_t, dys_t_scales, act_t, act_t_scales, dpre_t, dpre_t_scales, xs_t, xs_t_scales;
  TensorView xs_fp8_bwd, xs_scales_bwd;
  TensorView dys_qdq, dpre_qdq, xs_qdq_bwd;  // MXFP8 backward scratch
  SharedExpertFp8 shared_fp8;                 // FP8 with a shared expert
};

Views make_views(const MoeConfig& config, const Plan& plan, const Regions& regions);

}  // namespace moefuse::layer
