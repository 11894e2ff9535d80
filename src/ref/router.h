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
//
// A batch split over calls (expert parallelism: rank s routes its own T_s of the T tokens):
// route each part, sum every part's router_batch_part (an all-reduce of E + 1 integers) and pass
// that `batch` to router_losses and route_backward. f_i = counts_i / (T k) is then the whole
// batch's, and each part's losses are its share of the whole batch's, its tokens' terms of the
// means over T:
//   aux_s = aux_loss_coeff * E * sum_i f_i * P_i,s,  P_i,s = sum_{t in s} q[t, i] / T;
//   z_s   = z_loss_coeff * sum_{t in s} logsumexp(logits_t)^2 / T.
// Summed over the parts they are the losses of the whole batch routed in one call (up to the
// order of the fp64 sums). route_backward gives each token the one-call d_logits bit for bit:
// aux_s and z_s read only part s's logits (f carries no gradient), so for t in part s
// ∂(Σ_s aux_s + z_s)/∂logits_t = ∂(aux_s + z_s)/∂logits_t, and that reads only T and f, from
// integer sums, exact in any order. Shares rather than every part computing the whole loss: that
// would need the P_i and logsumexp² sums all-reduced too (fp64, order-dependent), and a total
// loss summed over the parts would count it R times.
#pragma once

#include <optional>
#include <vector>

#include "moefuse/config.h"
#include "moefuse/tensor.h"

namespace moefuse::ref {

// logits [T, E] = x [T, H] · w_router [E, H]^T.
void router_logits(const TensorView& x, const TensorView& w_router, const TensorView& logits);

// The whole batch the losses average over when a call routes only part of it (above).
struct RouterBatch {
  int64_t tokens = 0;           // T, all parts' tokens
  std::vector<int64_t> counts;  // [E] assignments per expert, all parts'
};

// One part's contribution to its RouterBatch: its tokens and its counts [E] int32 (from route).
RouterBatch router_batch_part(int64_t tokens, const TensorView& counts);

struct RouterLosses {
  double aux_loss = 0;       // includes aux_loss_coeff; with a batch, this part's share
  double z_loss = 0;         // includes z_loss_coeff; with a batch, this part's share
  std::vector<double> f;     // [E] fraction of the batch's T·k assignments per expert
  std::vector<double> P;     // [E] mean routing distribution q per expert (this part's P_i,s)
};

// From logits [T, E] (and score_bias [E] when options.use_score_bias; else an empty view):
// expert_idx [T, k] int32, probs [T, k] fp32, counts [E] int32; returns router_losses of this
// call's tokens alone.
RouterLosses route(const RouterOptions& options, int64_t top_k, const TensorView& logits,
                   const TensorView& score_bias, const TensorView& expert_idx,
                   const TensorView& probs, const TensorView& counts);

// The losses of logits [T, E] whose routing gave counts [E] int32 (summing to T·k): over this
// call's tokens, or over `batch` (its counts at least this call's, summing to its tokens · k).
RouterLosses router_losses(const RouterOptions& options, int64_t top_k, const TensorView& logits,
                           const TensorView& counts,
                           const std::optional<RouterBatch>& batch = std::nullopt);

// d_logits [T, E] from d_probs [T, k] (upstream gradient of the routing weights) plus the
// gradients of aux and z loss (each entering the total loss with weight 1; over `batch` when
// given, as in router_losses). The selection itself (idx) is piecewise constant and has no
// gradient; counts (f_i) carry none.
void route_backward(const RouterOptions& options, int64_t top_k, const TensorView& logits,
                    const TensorView& expert_idx, const TensorView& counts,
                    const TensorView& d_probs, const TensorView& d_logits,
                    const std::optional<RouterBatch>& batch = std::nullopt);

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
