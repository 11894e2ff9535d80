#include "ref/router.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>

#include "moefuse/error.h"
#include "ref/check.h"
#include "ref/gemm.h"

namespace moefuse::ref {
namespace {

bool is_sigmoid(const RouterOptions& o) { return o.kind == RouterKind::kSigmoidGroupTopK; }

// The router options and k against E, through the config's own checks (names "config.*").
void validate_options(const RouterOptions& options, int64_t top_k, int64_t num_experts) {
  MOEFUSE_EXPECT(num_experts > 0, "logits", "at least one expert column", "0 columns");
  MoeConfig c{.hidden = 1, .ffn = 1, .num_experts = num_experts, .top_k = top_k,
              .router = options};
  c.validate();
}

// What the router computes from one token's logits, in fp64.
struct TokenRouting {
  std::vector<double> p;  // softmax(logits)
  std::vector<double> s;  // sigmoid(logits) (sigmoid router only)
  double lse = 0;         // logsumexp(logits)

  TokenRouting(const RouterOptions& options, const float* logits, int64_t E) : p(E) {
    double mx = -INFINITY;
    for (int64_t e = 0; e < E; ++e) mx = std::max(mx, static_cast<double>(logits[e]));
    double sum = 0;
    for (int64_t e = 0; e < E; ++e) sum += (p[e] = std::exp(logits[e] - mx));
    for (auto& v : p) v /= sum;
    lse = mx + std::log(sum);
    if (is_sigmoid(options)) {
      s.resize(E);
      for (int64_t e = 0; e < E; ++e) s[e] = 1.0 / (1.0 + std::exp(-static_cast<double>(logits[e])));
    }
  }
  // The unnormalised routing weight of every expert (p or s).
  const std::vector<double>& score() const { return s.empty() ? p : s; }
  // The distribution the aux loss averages: p, or s / sum(s).
  std::vector<double> q() const {
    if (s.empty()) return p;
    const double sum = std::accumulate(s.begin(), s.end(), 0.0);
    std::vector<double> out(s);
    for (auto& v : out) v /= sum;
    return out;
  }
};

// The tie rule of router.h: higher score first, equal scores lower index first.
void rank(std::vector<int>& ids, const std::vector<double>& score) {
  std::sort(ids.begin(), ids.end(), [&](int a, int b) {
    return score[a] > score[b] || (score[a] == score[b] && a < b);
  });
}

std::vector<int> select_experts(const RouterOptions& options, int64_t top_k,
                                const TokenRouting& r, const float* bias) {
  const int64_t E = static_cast<int64_t>(r.p.size());
  std::vector<double> sel = r.score();
  if (bias) for (int64_t e = 0; e < E; ++e) sel[e] += bias[e];
  std::vector<int> eligible;
  if (is_sigmoid(options) && options.num_groups > 1) {
    const int64_t per = E / options.num_groups;
    std::vector<double> group_score(options.num_groups);
    std::vector<int> groups(options.num_groups);
    for (int g = 0; g < options.num_groups; ++g) {
      std::vector<double> members(sel.begin() + g * per, sel.begin() + (g + 1) * per);
      std::partial_sort(members.begin(), members.begin() + 2, members.end(), std::greater<>());
      group_score[g] = members[0] + members[1];
      groups[g] = g;
    }
    rank(groups, group_score);
    for (int i = 0; i < options.topk_groups; ++i)
      for (int64_t e = 0; e < per; ++e) eligible.push_back(static_cast<int>(groups[i] * per + e));
  } else {
    eligible.resize(E);
    std::iota(eligible.begin(), eligible.end(), 0);
  }
  rank(eligible, sel);
  eligible.resize(top_k);
  return eligible;
}

// The counts of `batch` sum to its tokens · k: k assignments a token.
void expect_assignments(const RouterBatch& batch, int64_t top_k, const char* name) {
  const int64_t sum = std::accumulate(batch.counts.begin(), batch.counts.end(), int64_t{0});
  MOEFUSE_EXPECT(sum == batch.tokens * top_k, name,
                 "a sum of T · k = " + std::to_string(batch.tokens * top_k), std::to_string(sum));
}

// The batch the losses average over: `batch`, checked against this call's own, or its own.
RouterBatch whole_batch(const std::optional<RouterBatch>& batch, const RouterBatch& own,
                        int64_t top_k) {
  if (!batch) return own;
  const size_t E = own.counts.size();
  MOEFUSE_EXPECT(batch->counts.size() == E, "batch.counts", std::to_string(E) + " experts",
                 std::to_string(batch->counts.size()));
  MOEFUSE_EXPECT(batch->tokens >= own.tokens, "batch.tokens",
                 "at least this call's " + std::to_string(own.tokens),
                 std::to_string(batch->tokens));
  for (size_t e = 0; e < E; ++e)
    MOEFUSE_EXPECT(batch->counts[e] >= own.counts[e], "batch.counts",
                   "at least this call's " + std::to_string(own.counts[e]) + " for expert " +
                       std::to_string(e),
                   std::to_string(batch->counts[e]));
  expect_assignments(*batch, top_k, "batch.counts");
  return *batch;
}

// f_i = counts_i / (T k) of the batch; 0 without tokens.
std::vector<double> assignment_fractions(const RouterBatch& batch, int64_t top_k) {
  std::vector<double> f(batch.counts.size());
  for (size_t e = 0; e < f.size() && batch.tokens > 0; ++e)
    f[e] = static_cast<double>(batch.counts[e]) / static_cast<double>(batch.tokens * top_k);
  return f;
}

}  // namespace

RouterBatch router_batch_part(int64_t tokens, const TensorView& counts) {
  expect_i32(counts, "counts", {kAnyExtent});
  MOEFUSE_EXPECT(tokens >= 0, "tokens", "at least 0", std::to_string(tokens));
  const int32_t* c = counts.as<const int32_t>();
  return {.tokens = tokens, .counts = std::vector<int64_t>(c, c + counts.size(0))};
}

void router_logits(const TensorView& x, const TensorView& w_router, const TensorView& logits) {
  expect_f32(w_router, "w_router", {kAnyExtent, kAnyExtent});
  const int64_t E = w_router.size(0), H = w_router.size(1);
  expect_f32(x, "x", {kAnyExtent, H});
  const int64_t T = x.size(0);
  expect_f32(logits, "logits", {T, E});
  std::vector<double> out(T * E);
  matmul(T, E, H, rows_of(x.as<const float>(), H), rows_of(w_router.as<const float>(), H).transposed(),
         out.data(), false);
  std::copy(out.begin(), out.end(), logits.as<float>());
}

RouterLosses route(const RouterOptions& options, int64_t top_k, const TensorView& logits,
                   const TensorView& score_bias, const TensorView& expert_idx,
                   const TensorView& probs, const TensorView& counts) {
  expect_f32(logits, "logits", {kAnyExtent, kAnyExtent});
  const int64_t T = logits.size(0), E = logits.size(1);
  validate_options(options, top_k, E);
  expect_optional_f32(score_bias, "score_bias", options.use_score_bias,
                      "config.router.use_score_bias is false", {E});
  expect_i32(expert_idx, "expert_idx", {T, top_k});
  expect_f32(probs, "probs", {T, top_k});
  expect_i32(counts, "counts", {E});
  expect_finite(logits, "logits");
  const float* bias = options.use_score_bias ? score_bias.as<const float>() : nullptr;
  if (bias) expect_finite(score_bias, "score_bias");

  std::vector<int64_t> count(E);
  for (int64_t t = 0; t < T; ++t) {
    const TokenRouting r(options, logits.as<const float>() + t * E, E);
    const std::vector<int> idx = select_experts(options, top_k, r, bias);
    double sum = 0;
    for (int j : idx) sum += r.score()[j];
    for (int64_t j = 0; j < top_k; ++j) {
      double w = r.score()[idx[j]];
      if (options.renormalize) w /= sum;
      probs.as<float>()[t * top_k + j] = static_cast<float>(w * options.routed_scaling_factor);
      expert_idx.as<int32_t>()[t * top_k + j] = idx[j];
      ++count[idx[j]];
    }
  }
  for (int64_t e = 0; e < E; ++e) counts.as<int32_t>()[e] = static_cast<int32_t>(count[e]);
  return router_losses(options, top_k, logits, counts);
}

RouterLosses router_losses(const RouterOptions& options, int64_t top_k, const TensorView& logits,
                           const TensorView& counts, const std::optional<RouterBatch>& batch) {
  expect_f32(logits, "logits", {kAnyExtent, kAnyExtent});
  const int64_t T = logits.size(0), E = logits.size(1);
  validate_options(options, top_k, E);
  expect_i32(counts, "counts", {E});
  expect_finite(logits, "logits");
  expect_values_in(counts, "counts", 0, T + 1);  // each expert at most once a token
  const RouterBatch own = router_batch_part(T, counts);
  expect_assignments(own, top_k, "counts");
  const RouterBatch all = whole_batch(batch, own, top_k);

  RouterLosses losses{.f = assignment_fractions(all, top_k), .P = std::vector<double>(E)};
  double z_sum = 0;
  for (int64_t t = 0; t < T; ++t) {
    const TokenRouting r(options, logits.as<const float>() + t * E, E);
    const std::vector<double> q = r.q();
    for (int64_t e = 0; e < E; ++e) losses.P[e] += q[e];
    z_sum += r.lse * r.lse;
  }
  if (all.tokens == 0) return losses;  // no tokens: no assignments, both losses 0
  double fp = 0;
  for (int64_t e = 0; e < E; ++e) {
    losses.P[e] /= static_cast<double>(all.tokens);
    fp += losses.f[e] * losses.P[e];
  }
  losses.aux_loss = options.aux_loss_coeff * static_cast<double>(E) * fp;
  losses.z_loss = options.z_loss_coeff * z_sum / static_cast<double>(all.tokens);
  return losses;
}

void route_backward(const RouterOptions& options, int64_t top_k, const TensorView& logits,
                    const TensorView& expert_idx, const TensorView& counts,
                    const TensorView& d_probs, const TensorView& d_logits,
                    const std::optional<RouterBatch>& batch) {
  expect_f32(logits, "logits", {kAnyExtent, kAnyExtent});
  const int64_t T = logits.size(0), E = logits.size(1);
  validate_options(options, top_k, E);
  expect_i32(expert_idx, "expert_idx", {T, top_k});
  expect_i32(counts, "counts", {E});
  expect_f32(d_probs, "d_probs", {T, top_k});
  expect_f32(d_logits, "d_logits", {T, E});
  expect_finite(logits, "logits");
  expect_values_in(expert_idx, "expert_idx", 0, E);
  const int32_t* idx = expert_idx.as<const int32_t>();
  std::vector<int64_t> histogram(E);
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t j = 0; j < top_k; ++j) {
      ++histogram[idx[t * top_k + j]];
      for (int64_t i = 0; i < j; ++i)
        MOEFUSE_EXPECT(idx[t * top_k + i] != idx[t * top_k + j], "expert_idx",
                       "k distinct experts per token",
                       "expert " + std::to_string(idx[t * top_k + j]) + " twice in token " +
                           std::to_string(t));
    }
  }
  for (int64_t e = 0; e < E; ++e)
    MOEFUSE_EXPECT(counts.as<const int32_t>()[e] == histogram[e], "counts",
                   "the histogram of expert_idx (" + std::to_string(histogram[e]) + " for expert " +
                       std::to_string(e) + ")",
                   std::to_string(counts.as<const int32_t>()[e]));
  const RouterBatch all = whole_batch(batch, {.tokens = T, .counts = histogram}, top_k);
  const std::vector<double> f = assignment_fractions(all, top_k);

  const double c = options.routed_scaling_factor;
  // d aux / d q[t, i] = alpha * E * f_i / T, the same for every token.
  std::vector<double> dq(E);
  for (int64_t e = 0; e < E && all.tokens > 0; ++e)
    dq[e] = options.aux_loss_coeff * static_cast<double>(E) * f[e] /
            static_cast<double>(all.tokens);
  for (int64_t t = 0; t < T; ++t) {
    const TokenRouting r(options, logits.as<const float>() + t * E, E);
    const int32_t* id = idx + t * top_k;
    const float* dw = d_probs.as<const float>() + t * top_k;
    // Through the scaling and the renormalisation w_j = r_j / S to the raw scores
    // r_j = score[idx_j]: c·(g_j − Σ g_i w_i) / S, exactly 0 at top_k 1 (the kernel's form).
    double sum = 0, dot = 0;
    for (int64_t j = 0; j < top_k; ++j) sum += r.score()[id[j]];
    for (int64_t j = 0; j < top_k; ++j) dot += dw[j] * (r.score()[id[j]] / sum);
    std::vector<double> d_score(E);
    for (int64_t j = 0; j < top_k; ++j)
      d_score[id[j]] += options.renormalize ? c * (dw[j] - dot) / sum : c * dw[j];

    std::vector<double> dl(E);
    if (!is_sigmoid(options)) {
      // Routing weights and aux both read p = softmax(l): dl = p * (dp - <dp, p>).
      double dpp = 0;
      for (int64_t e = 0; e < E; ++e) dpp += (d_score[e] + dq[e]) * r.p[e];
      for (int64_t e = 0; e < E; ++e) dl[e] = r.p[e] * (d_score[e] + dq[e] - dpp);
    } else {
      // q = s / sum(s): ds_m += (dq_m - <dq, q>) / sum(s); then through the sigmoid.
      const double s_sum = std::accumulate(r.s.begin(), r.s.end(), 0.0);
      double dqq = 0;
      for (int64_t e = 0; e < E; ++e) dqq += dq[e] * r.s[e] / s_sum;
      for (int64_t e = 0; e < E; ++e)
        dl[e] = (d_score[e] + (dq[e] - dqq) / s_sum) * r.s[e] * (1.0 - r.s[e]);
    }
    // z = beta / T * sum_t lse_t^2: dl += 2 beta / T * lse_t * p.
    const double dz = 2.0 * options.z_loss_coeff * r.lse / static_cast<double>(all.tokens);
    for (int64_t e = 0; e < E; ++e)
      d_logits.as<float>()[t * E + e] = static_cast<float>(dl[e] + dz * r.p[e]);
  }
}

void route_backward_error_scale(const RouterOptions& options, int64_t top_k,
                                const TensorView& logits, const TensorView& expert_idx,
                                const TensorView& d_probs_scale, const TensorView& d_logits_scale) {
  expect_f32(logits, "logits", {kAnyExtent, kAnyExtent});
  const int64_t T = logits.size(0), E = logits.size(1);
  validate_options(options, top_k, E);
  expect_i32(expert_idx, "expert_idx", {T, top_k});
  expect_f32(d_probs_scale, "d_probs_scale", {T, top_k});
  expect_f32(d_logits_scale, "d_logits_scale", {T, E});
  expect_finite(logits, "logits");
  expect_values_in(expert_idx, "expert_idx", 0, E);
  const double c = std::fabs(options.routed_scaling_factor);
  // The bound of x_j − <w, x>: (1 − w_j)|x_j| + Σ_{i≠j} w_i|x_i| = (1 − 2w_j)|x_j| + <w, |x|>.
  const auto centred = [](double w_j, double abs_x_j, double w_dot_abs_x) {
    return (1.0 - 2.0 * w_j) * abs_x_j + w_dot_abs_x;
  };
  for (int64_t t = 0; t < T; ++t) {
    const TokenRouting r(options, logits.as<const float>() + t * E, E);
    const int32_t* id = expert_idx.as<const int32_t>() + t * top_k;
    const float* m = d_probs_scale.as<const float>() + t * top_k;
    double sum = 0, dot = 0;
    for (int64_t j = 0; j < top_k; ++j) sum += r.score()[id[j]];
    for (int64_t j = 0; j < top_k; ++j) dot += m[j] * (r.score()[id[j]] / sum);
    std::vector<double> d_score(E);
    for (int64_t j = 0; j < top_k; ++j)
      d_score[id[j]] = options.renormalize ? c * centred(r.score()[id[j]] / sum, m[j], dot) / sum
                                           : c * m[j];
    double dsp = 0;
    for (int64_t e = 0; e < E; ++e) dsp += d_score[e] * r.p[e];
    for (int64_t e = 0; e < E; ++e)
      d_logits_scale.as<float>()[t * E + e] = static_cast<float>(
          is_sigmoid(options) ? d_score[e] * r.s[e] * (1.0 - r.s[e])
                              : r.p[e] * centred(r.p[e], d_score[e], dsp));
  }
}

void router_logits_backward(const TensorView& x, const TensorView& w_router,
                            const TensorView& d_logits, const TensorView& dx_accumulate,
                            const TensorView& d_w_router) {
  expect_f32(w_router, "w_router", {kAnyExtent, kAnyExtent});
  const int64_t E = w_router.size(0), H = w_router.size(1);
  expect_f32(x, "x", {kAnyExtent, H});
  const int64_t T = x.size(0);
  expect_f32(d_logits, "d_logits", {T, E});
  expect_f32(dx_accumulate, "dx_accumulate", {T, H});
  expect_f32(d_w_router, "d_w_router", {E, H});
  const auto dl = rows_of(d_logits.as<const float>(), E);
  std::vector<double> dx(T * H);
  for (int64_t i = 0; i < T * H; ++i) dx[i] = dx_accumulate.as<const float>()[i];
  matmul(T, H, E, dl, rows_of(w_router.as<const float>(), H), dx.data(), true);
  std::copy(dx.begin(), dx.end(), dx_accumulate.as<float>());
  std::vector<double> dw(E * H);
  matmul(E, H, T, dl.transposed(), rows_of(x.as<const float>(), H), dw.data(), false);
  std::copy(dw.begin(), dw.end(), d_w_router.as<float>());
}

}  // namespace moefuse::ref
