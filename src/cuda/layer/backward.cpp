// MoeLayer::backward. The gradient of <y, dy> + aux_loss + z_loss.
//
// Main stream:
//   [recompute FC1 pre-activation] → combine_bwd (dys[row] = dy[t]: the weights were applied by
//   FC2, or by the combine — the same function of p either way) → FC2 dgrad (+ dGLU → d_pre,
//   + p·act for dW2, + dp per row, + d_b2 for bf16) → FC1 dgrad → d_probs = dp gathered to [T,k] →
//   router_topk_bwd (+ aux, z) → router_logits_bwd (dWr) → permute_bwd (dx = Σ dxs + shared dx
//   + d_logits·Wr, one pass: permute_backward_router)
//   → the bias gradients and the k-grouped wgrads dW2 = Σ dysᵀ·(p·act), dW1 = Σ d_preᵀ·xs
//   (xs = x[token_of_row]: permuted by the recompute, or, fused, by the FC1 dgrad's epilogue
//   warps between their tiles, or by the wgrad stage first; each faster than gathering inside
//   the wgrad).
// Second stream: the shared expert's backward, from the start; the main stream joins it before
// permute_bwd, which adds its dx.
// The routed wgrads once ran on the second stream beside FC1 dgrad. But each of these GEMMs is a
// persistent grid holding every SM (one CTA an SM, ~220 KiB of shared memory each): two of them
// cannot share SMs, so running them together only interleaves their CTAs, which then start at
// scattered times and walk their static tile orders out of step, losing the weight tiles' L2
// reuse. In order on one stream the step measured 0.947-0.950× the time on gpt-oss and
// 0.99-1.00× on the other presets (docs/measurements.md, run 30, calls 4-5). The shared expert
// beside the routed work costs nothing measurable (run 30, call 9), so it keeps its stream.
// FP8 layers (config.precision kFP8Blockwise): the same stages, streams and joins; the routed
// experts' GEMMs run in FP8 (backward_fp8.h): pre cached by the forward's FP8 FC1 (with
// recompute_pre: recomputed in FP8 from x), dys and d_pre quantised row-wise for the dgrads (on
// W2ᵀ, W1ᵀ from prepare_fp8_weights) and column-wise for the wgrads; dys's copies (and dW1's x)
// gathered from the tokens by their quantisers, so combine_bwd writes no bf16 dys unless the
// bias terms or bf16 wgrads read it. With config.bf16_wgrad the wgrads are the bf16 layer's (dW1
// on x permuted by its own gather). The shared expert's GEMMs run in FP8 too, on its second
// stream (shared_expert_fp8.h). Bias gradients and the router are the bf16 path's.
// MXFP8 layers (config.precision kMXFP8): the bf16 path on quantise-dequantised operands
// (ref/layer_mxfp8.h): the recompute's x rows, dys and d_pre row-wise for the dgrads (into
// scratch, on the main stream) with the weights' dgrad copies; for the wgrads dys, p·act, d_pre
// and x's permuted rows column-wise, in place, after the bias sums.
#include <cuda_bf16.h>

#include "cuda/check.h"
#include "cuda/device.h"
#include "cuda/layer/backward_fp8.h"
#include "cuda/layer/kernels.h"
#include "cuda/layer/layer_args.h"
#include "cuda/layer/layer_handles.h"
#include "cuda/layer/ops.h"
#include "cuda/layer/plan.h"
#include "cuda/layer/shared_expert.h"
#include "cuda/layer/stage.h"
#include "cuda/layer/views.h"
#include "moefuse/dispatch.h"
#include "moefuse/grouped_gemm.h"
#include "moefuse/grouped_gemm_backward.h"
#include "moefuse/layer.h"
#include "moefuse/quant.h"
#include "moefuse/router.h"

// Designated initialisers leave the optional views (bias, row_scale, ...) empty on purpose.
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"

namespace moefuse {

void MoeLayer::backward(const TensorView& x, const TensorView& dy, const MoeLayerWeights& w,
                        const MoeLayerGrads& g, Workspace cache, Workspace workspace,
                        cudaStream_t stream, const LayerRun& run) {
  const int64_t T =
      layer::check_layer_backward(config_, options_, x, dy, w, g, cache, workspace, run.health);
  handles_->expect_launchable_here(stream, "MoeLayer");
  const layer::Plan p = layer::make_plan(config_, options_, T);
  const layer::Views v =
      layer::make_views(config_, p, {.cache = cache, .workspace = workspace, .fp8 = w.fp8});
  const bool recompute = layer::recomputes_pre(config_, options_);
  const bool fp8 = config_.precision == PrecisionRecipe::kFP8Blockwise;
  const bool fp8_wgrad = fp8 && !config_.bf16_wgrad;
  const bool mx = config_.precision == PrecisionRecipe::kMXFP8;
  const bool mx_wgrad = mx && !config_.bf16_wgrad;
  const bool fused = options_.mode == LayerMode::kFused;
  const bool shared = config_.shared_expert_ffn > 0;
  const int64_t k = config_.top_k;
  LayerObserver* obs = run.observer;
  layer::LayerHandles& h = *handles_;
  auto run_gemm = [&](const GroupedGemmArgs& args, cudaStream_t s) {
    layer::run_grouped_gemm(args, fused, s);
  };

  if (shared) {
    h.fork(h.fork_event, stream, h.side);
    layer::run_stage(LayerStage::kSharedExpertBackward, h.side, obs, [&] {
      layer::shared_expert_backward(config_, x, dy, w, g,
                                    {.offsets = v.shared_offsets,
                                     .pre = v.shared_pre_bwd,
                                     .dpre = v.shared_dpre,
                                     .act_bwd = v.shared_act_bwd,
                                     .dx = v.shared_dx,
                                     .g = v.shared_g,
                                     .fp8 = v.shared_fp8},
                                    recompute, fused, h.side);
    });
    MOEFUSE_CUDA_CHECK(cudaEventRecord(h.shared_done, h.side));
  }

  // bf16: x permuted into xs_bwd, by the recompute here (then dW1 reads it too) or by dW1's
  // own gather just before it (the forward's reasoning: the permuted copy beats gathering).
  if (recompute) {
    layer::run_stage(LayerStage::kRecomputeFc1, stream, obs, [&] {
      if (fp8) return layer::recompute_pre_fp8(x, w, v, run.health, stream);
      permute(x, v.row_of, v.token_of_row, v.xs_bwd, run.health, stream);
      // MXFP8: xs_bwd stays unquantised for dW1's column-wise copy.
      if (mx) qdq_mxfp8_rows(v.xs_bwd, v.xs_qdq_bwd, stream);
      run_gemm({.a = mx ? v.xs_qdq_bwd : v.xs_bwd,
                .b = mx ? v.w1_qdq : w.w1,
                .offsets = v.offsets,
                .d = v.pre_bwd,
                .bias = w.b1},
               stream);
    });
  }
  layer::run_stage(LayerStage::kCombineBackward, stream, obs, [&] {
    if (fp8) return layer::combine_backward_fp8(config_, dy, v, run.health, stream);
    combine_backward(dy, {}, {}, v.row_of, v.token_of_row, v.dys, {}, run.health, stream);
  });
  layer::run_stage(LayerStage::kFc2Dgrad, stream, obs, [&] {
    if (fp8) return layer::fc2_dgrad_fp8(config_, w, v, stream);
    if (mx) qdq_mxfp8_rows(v.dys, v.dys_qdq, stream);
    const bool d_b2 = layer::fc2_dgrad_sums_d_b2(config_);
    layer::run_fc2_dgrad({.dys = mx ? v.dys_qdq : v.dys,
                          .w2 = mx ? v.w2_qdq_dgrad : w.w2,
                          .offsets = v.offsets,
                          .pre = v.pre_bwd,
                          .d_pre = v.dpre,
                          .activation = config_.activation,
                          .clamped_swiglu = config_.clamped_swiglu,
                          .row_scale = v.row_prob,
                          .scaled_act = v.act_bwd,
                          .d_row_scale = v.d_row_prob,
                          .b2 = w.b2,
                          .d_b2 = d_b2 ? g.d_b2 : TensorView{},
                          .accumulate_d_b2 = d_b2 && g.accumulate},
                         fused, v.dp_partial, v.bias_partial, v.g, v.d_b2_units, stream);
    // FC1 dgrad's operand, before the wgrads quantise d_pre column-wise in place.
    if (mx) qdq_mxfp8_rows(v.dpre, v.dpre_qdq, stream);
  });
  // dW1's xs, where no recompute permuted x: fused, the FC1 dgrad's epilogue warps permute it
  // between their tiles (GroupedGemmDgradArgs::permute), else the wgrad stage does.
  const bool dgrad_permutes_x = fused && !recompute && !fp8;
  layer::run_stage(LayerStage::kFc1Dgrad, stream, obs, [&] {
    if (fp8) return layer::fc1_dgrad_fp8(v, stream);
    grouped_gemm_dgrad({.a = mx ? v.dpre_qdq : v.dpre,
                        .b = mx ? v.w1_qdq_dgrad : w.w1,
                        .offsets = v.offsets,
                        .d = v.dxs,
                        .permute = dgrad_permutes_x ? GroupedGemmDgradArgs::Permute{
                                                          .x = x,
                                                          .row_of = v.row_of,
                                                          .token_of_row = v.token_of_row,
                                                          .xs = v.xs_bwd,
                                                          .health = run.health}
                                                    : GroupedGemmDgradArgs::Permute{}},
                       stream);
  });
  layer::run_stage(LayerStage::kRouterBackward, stream, obs, [&] {
    layer::gather_row_prob_grad(v.d_row_prob.as<float>(), v.row_of.as<int32_t>(),
                                v.d_probs.as<float>(), T * k, p.rows, stream);
    router_topk_backward(config_.router, k, v.logits, v.expert_idx, v.counts, v.d_probs,
                         g.loss_grads, v.d_logits, stream);
    // dWr only: the router's dx is added by the permute's backward below.
    router_logits_backward(h.cublas, x, w.w_router, v.d_logits, TensorView{}, g.d_w_router,
                           v.router_gemm, stream, g.accumulate);
  });
  layer::run_stage(LayerStage::kPermuteBackward, stream, obs, [&] {
    // The shared expert's dx and the router's are added inside the permute's backward (one pass
    // over [T, H]).
    if (shared) MOEFUSE_CUDA_CHECK(cudaStreamWaitEvent(stream, h.shared_done, 0));
    permute_backward_router(v.dxs, v.row_of, shared ? v.shared_dx : TensorView{}, v.d_logits,
                            w.w_router, g.dx, run.health, stream);
  });
  // The weight gradients. The dgrads are done with dys, p·act and d_pre, so MXFP8 may quantise
  // them in place, column-wise, once the bias sums have read dys and d_pre.
  layer::run_stage(LayerStage::kFc2Wgrad, stream, obs, [&] {
    if (config_.expert_bias && !layer::fc2_dgrad_sums_d_b2(config_))  // else the FC2 dgrad's
      layer::bias_gradient(v.dys, v.row_prob, v.offsets, g.d_b2, v.d_b2_units, g.accumulate,
                           stream);
    if (fp8_wgrad) return layer::fc2_wgrad_fp8(dy, g, v, stream);
    if (mx_wgrad) {
      qdq_mxfp8_cols(v.dys, v.offsets, v.dys, stream);
      qdq_mxfp8_cols(v.act_bwd, v.offsets, v.act_bwd, stream);
    }
    grouped_gemm_wgrad({.a = v.dys,
                        .b = v.act_bwd,
                        .offsets = v.offsets,
                        .d = g.d_w2,
                        .accumulate = g.accumulate},
                       stream);
  });
  layer::run_stage(LayerStage::kFc1Wgrad, stream, obs, [&] {
    if (config_.expert_bias)
      layer::bias_gradient(v.dpre, TensorView{}, v.offsets, g.d_b1, v.d_b1_units, g.accumulate,
                           stream);
    if (fp8_wgrad) return layer::fc1_wgrad_fp8(x, g, v, stream);
    // x's rows in expert order (unquantised for MXFP8's column-wise copy): permuted by the bf16
    // and MXFP8 recompute, else here. The permute reads each x row once and writes its k rows
    // (qwen3: 0.17 ms, where the row gather of grouped_gemm_wgrad_unfused, k reads an x row,
    // took 0.26 ms in the graph: run 34).
    if ((!recompute || fp8) && !dgrad_permutes_x)
      permute(x, v.row_of, v.token_of_row, v.xs_bwd, run.health, stream);
    if (mx_wgrad) {
      qdq_mxfp8_cols(v.xs_bwd, v.offsets, v.xs_bwd, stream);
      qdq_mxfp8_cols(v.dpre, v.offsets, v.dpre, stream);
    }
    grouped_gemm_wgrad({.a = v.dpre,
                        .b = v.xs_bwd,
                        .offsets = v.offsets,
                        .d = g.d_w1,
                        .accumulate = g.accumulate},
                       stream);
  });
}

}  // namespace moefuse
