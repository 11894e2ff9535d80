// EpMoeLayer::backward. The gradient of <y, dy> + aux_loss + z_loss, as MoeLayer::backward with
// the expert rows on their owners' ranks.
//
// Main stream:
//   combine_bwd (dys[row] = p·dy[t], d_probs = <dy[t], ys[row]> from the cached returned rows)
//   → ep_dispatch_bwd (dys rows to the experts' ranks, along the forward's map)
//   → FC2 dgrad (+ dGLU → d_pre, act) → FC1 dgrad (dxs) → ep_return_bwd (dxs rows home)
//   → router_topk_bwd (+ aux, z) → router_logits_bwd (d_w_router of this rank's tokens)
//   → permute_bwd (dx = Σ dxs + shared dx + d_logits·Wr, one pass: permute_backward_router).
// With chunks > 1 the transfers run in parts on the transfer stream, pipelined with the dgrads
// of each part as the forward (ep_layer.cpp, ep_pipeline.h).
// Second stream: the shared expert's backward from the start; once every d_pre exists, the
// k-grouped wgrads of this rank's experts, dW2 = Σ dysᵀ·act over the received dys and
// dW1 = Σ d_preᵀ·xs over the forward's received rows (cached), and the bias gradients, beside
// the returns. Both read only this rank's buffers and its receive window, which no peer writes
// before this rank's next dispatch (after the join at the end).
#include <cuda_bf16.h>

#include "cuda/check.h"
#include "cuda/layer/kernels.h"
#include "cuda/layer/layer_args.h"
#include "cuda/layer/layer_handles.h"
#include "cuda/layer/ops.h"
#include "cuda/layer/shared_expert.h"
#include "cuda/layer/stage.h"
#include "dist/ep_layer_plan.h"
#include "dist/nccl/ep_chunks.h"
#include "dist/nccl/ep_comm.h"
#include "dist/nccl/ep_pass.h"
#include "moefuse/dispatch.h"
#include "moefuse/ep_layer.h"
#include "moefuse/grouped_gemm.h"
#include "moefuse/grouped_gemm_backward.h"
#include "moefuse/router.h"

// Designated initialisers leave the optional views (bias, row_scale, ...) empty on purpose.
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"

namespace moefuse {

void EpMoeLayer::routed_experts_backward(const MoeLayerWeights& w, const MoeLayerGrads& g,
                                         const dist::EpLayerViews& v, LayerObserver* obs,
                                         cudaStream_t stream) {
  layer::LayerHandles& h = *handles_;
  const dist::EpChunks chunks = this->chunks();
  dist::EpPass pass(*comm_, chunks, pipeline_.get(), stream, obs);
  const int gemm_ctas = this->gemm_ctas();
  const TensorView dys = comm_->received(), offsets = comm_->receive_offsets();

  // The forward's offsets: the owners get the same receive layout (and receive_offsets()).
  pass.dispatch(v.dys, v.offsets, LayerStage::kEpDispatchBackward);
  for (int c = 0; c < chunks.count(); ++c) {
    pass.await_part(c);
    layer::run_stage(LayerStage::kFc2Dgrad, stream, obs, [&] {
      // No row scale: the combine applied the routing weight, combine_bwd differentiated it.
      grouped_gemm_fc2_dgrad({.dys = dys,
                              .w2 = chunks.experts(w.w2, c),
                              .offsets = chunks.offsets(c),
                              .pre = v.pre,
                              .d_pre = v.dpre,
                              .activation = config_.activation,
                              .clamped_swiglu = config_.clamped_swiglu,
                              .scaled_act = v.act_bwd,
                              .max_ctas = gemm_ctas},
                             Fc2DgradScratch{}, stream);
    });
    layer::run_stage(LayerStage::kFc1Dgrad, stream, obs, [&] {
      grouped_gemm_dgrad({.a = v.dpre,
                          .b = chunks.experts(w.w1, c),
                          .offsets = chunks.offsets(c),
                          .d = v.dxs,
                          .max_ctas = gemm_ctas},
                         stream);
    });
    pass.part_computed(c);
  }

  // dys, act and d_pre exist: the weight gradients go to the second stream, beside the returns
  // (pipelined, on the SMs the transfers leave).
  h.fork(h.fork_event, stream, h.side);
  layer::run_stage(LayerStage::kFc2Wgrad, h.side, obs, [&] {
    grouped_gemm_wgrad({.a = dys,
                        .b = v.act_bwd,
                        .offsets = offsets,
                        .d = g.d_w2,
                        .accumulate = g.accumulate,
                        .max_ctas = gemm_ctas},
                       h.side);
    if (config_.expert_bias)
      layer::bias_gradient(dys, TensorView{}, offsets, g.d_b2, v.d_b2_units, g.accumulate,
                           h.side);
  });
  layer::run_stage(LayerStage::kFc1Wgrad, h.side, obs, [&] {
    grouped_gemm_wgrad({.a = v.dpre,
                        .b = v.xs_received,
                        .offsets = offsets,
                        .d = g.d_w1,
                        .accumulate = g.accumulate,
                        .max_ctas = gemm_ctas},
                       h.side);
    if (config_.expert_bias)
      layer::bias_gradient(v.dpre, TensorView{}, offsets, g.d_b1, v.d_b1_units, g.accumulate,
                           h.side);
  });
  MOEFUSE_CUDA_CHECK(cudaEventRecord(h.join, h.side));
  pass.return_rows(v.dxs, LayerStage::kEpReturnBackward);
}

void EpMoeLayer::backward(const TensorView& x, const TensorView& dy, const MoeLayerWeights& w,
                          const MoeLayerGrads& g, Workspace cache, Workspace workspace,
                          cudaStream_t stream, const LayerRun& run) {
  const int64_t T = layer::check_backward_args(config_, arg_bounds(), x, dy, w, g, cache,
                                               workspace, run.health);
  layer::LayerHandles& h = *handles_;
  h.expect_launchable_here(stream, "EpMoeLayer");
  const dist::EpLayerPlan p = dist::make_ep_layer_plan(config_, comm_->plan(), T);
  const dist::EpLayerViews v = dist::make_ep_layer_views(config_, p, cache, workspace);
  dist::EpComm& ep = *comm_;
  const bool shared = config_.shared_expert_ffn > 0;
  const int64_t k = config_.top_k;
  LayerObserver* obs = run.observer;

  if (shared) {
    h.fork(h.fork_event, stream, h.side);
    layer::run_stage(LayerStage::kSharedExpertBackward, h.side, obs, [&] {
      layer::shared_expert_backward(config_, x, dy, w, g,
                                    {.offsets = v.shared_offsets,
                                     .pre = v.shared_pre,
                                     .dpre = v.shared_dpre,
                                     .act_bwd = v.shared_act_bwd,
                                     .dx = v.shared_dx},
                                    /*recompute=*/false, /*fused=*/true, h.side);
    });
    MOEFUSE_CUDA_CHECK(cudaEventRecord(h.shared_done, h.side));
  }

  layer::run_stage(LayerStage::kCombineBackward, stream, obs, [&] {
    combine_backward(dy, v.ys_returned, v.probs, v.row_of, v.token_of_row, v.dys, v.d_probs,
                     run.health, stream);
  });
  routed_experts_backward(w, g, v, obs, stream);
  layer::run_stage(LayerStage::kRouterBackward, stream, obs, [&] {
    router_topk_backward(config_.router, k, v.logits, v.expert_idx, v.counts, v.d_probs,
                         g.loss_grads, v.d_logits, stream);
    // dWr only: the router's dx is added by the permute's backward, as in MoeLayer.
    router_logits_backward(h.cublas, x, w.w_router, v.d_logits, TensorView{}, g.d_w_router,
                           v.router_gemm, stream, g.accumulate);
  });
  layer::run_stage(LayerStage::kPermuteBackward, stream, obs, [&] {
    if (shared) MOEFUSE_CUDA_CHECK(cudaStreamWaitEvent(stream, h.shared_done, 0));
    permute_backward_router(ep.returned(), v.row_of, shared ? v.shared_dx : TensorView{},
                            v.d_logits, w.w_router, g.dx, run.health, stream);
  });
  MOEFUSE_CUDA_CHECK(cudaStreamWaitEvent(stream, h.join, 0));
}

}  // namespace moefuse
