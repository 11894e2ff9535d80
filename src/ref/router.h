// CPU reference of the router: logits, top-k selection, routing weights, aux loss and z-loss,
// forward and backward. fp32 tensors, fp64 arithmetic. Every entry point validates its views
// (fp32/int32, Device::kCpu, shapes) and throws InvalidArgument naming the bad one.
//
// Selection and tie rule (the GPU router follows the same): experts are ranked by their selection
// score, higher first; equal scores rank the lower expert index first. idx[t, 0..k) lists the
// chosen experts in rank order. For kSigmoidGroupTopK, groups are ranked the same way by their
// group score (sum of the group's two best biased scores), lower group index first on ties.
//
// Routing weights (probs [T, k]):
//   kSoftmaxTopK:      p = softmax(logits_t); w_j = p[idx_j]
//   kSigmoidGroupTopK: s = sigmoid(logits_t); selection on s + score_bias; w_j = s[idx_j]
//   then, if renormalize, w_j /= sum_j w_j; then w_j *= routed_scaling_factor.
//
// Auxiliary losses (added to the training loss as they are; their gradients flow into logits):
//   aux  = aux_loss_coeff * E * sum_i f_i * P_i, f_i = count_i / (T k) (no gradient),
//          P_i = mean_t q[t, i], q = softmax(logits_t) (softmax router) or s / sum(s) (sigmoid);
//   z    = z_loss_coeff * mean_t logsumexp(logits_t)^2.
// With T = 0 both losses, f and P are 0. options.use_score_bias with the softmax router is
// rejected (InvalidArgument "config.router.use_score_bias").
#pragma once

#include <vector>

#include "moefuse/config.h"
#include "moefuse/tensor.h"

namespace moefuse::ref {

// logits [T, E] = x [T, H] · w_router [E, H]^T.
void router_logits(const TensorView& x, const TensorView& w_router, const TensorView& logits);

struct RouterLosses {
  double aux_loss = 0;       // includes aux_loss_coeff
  double z_loss = 0;         // includes z_loss_coeff
  std::vector<double> f;     // [E] fraction of the T·k assignments per expert
  std::vector<double> P;     // [E] mean routing distribution q per expert
};

// From logits [T, E] (and score_bias [E] when options.use_score_bias; else an empty view):
// expert_idx [T, k] int32, probs [T, k] fp32, counts [E] int32; returns the losses.
RouterLosses route(const RouterOptions& options, int64_t top_k, const TensorView& logits,
                   const TensorView& score_bias, const TensorView& expert_idx,
                   const TensorView& probs, const TensorView& counts);

// d_logits [T, E] from d_probs [T, k] (upstream gradient of the routing weights) plus the
// gradients of aux and z loss (each entering the total loss with weight 1). The selection itself
// (idx) is piecewise constant and has no gradient; counts (f_i) carry none.
void route_backward(const RouterOptions& options, int64_t top_k, const TensorView& logits,
                    const TensorView& expert_idx, const TensorView& counts,
                    const TensorView& d_probs, const TensorView& d_logits);

// How errors in d_probs reach route_backward's d_logits, for tests that bound a d_logits computed
// from rounded d_probs: d_logits_scale [T, E] = |J|·d_probs_scale [T, k] (d_probs_scale >= 0),
// J = ∂d_logits/∂d_probs. d_logits is linear in d_probs (the aux and z terms carry no error), so
// that is route_backward's formulas without the losses and with each centring x_j − Σ_i w_i x_i
// (Σ w = 1) replaced by its bound (1 − w_j)|x_j| + Σ_{i≠j} w_i|x_i|. It stays large where the
// centring cancels (two experts of about equal gradient) and d_logits is small; it is small where
// one weight is near 1 and d_logits is small too.
void route_backward_error_scale(const RouterOptions& options, int64_t top_k,
                                const TensorView& logits, const TensorView& expert_idx,
                                const TensorView& d_probs_scale, const TensorView& d_logits_scale);

// dx [T, H] += d_logits · w_router ("+=" so the layer can add it to the expert path's dx);
// d_w_router [E, H] = d_logits^T · x.
void router_logits_backward(const TensorView& x, const TensorView& w_router,
                            const TensorView& d_logits, const TensorView& dx_accumulate,
                            const TensorView& d_w_router);

}  // namespace moefuse::ref
