// Expert parallelism simulated on the CPU (issue 10): R ranks each route and permute their own
// tokens, ref::ep_dispatch sends the rows to the experts' owners, each owner runs the reference
// expert MLP on what it received with its slice of the weights, ref::ep_return brings the
// outputs back and each rank combines its own tokens; backward the same way in reverse. Against
// the single-rank reference layer on all ranks' tokens concatenated in rank order:
//   y, dx, and every expert's dW1, dW2, db1, db2: bit for bit. Every row is computed on its own
//     (router, MLP rows, combine, permute_backward: fp64 sums over k, H or F inside one row),
//     and the weight gradients sum an expert's rows in fp64 in the same order: ep_layout.h
//     hands the owner the single-GPU row order.
//   d_w_router: within (R + 2)·2^-24·Σ_s |partial_s| per element. Each rank sums its own tokens
//     (fp64, rounded to fp32: together at most 2^-24·Σ_s |partial_s|) and the partials are added
//     in fp32, as an all-reduce does (R - 1 roundings, each at most that much); one GPU rounds
//     the whole sum once (one more). That is R + 1, plus one for the fp64 sums; seen: up to 2
//     at R = 2 (one ulp), 3.5 at R = 8. R = 1 is bitwise.
// Two configs turn the router's aux and z losses on. Their f_i and means run over the whole
// batch: the ranks' router_batch_parts are summed in rank order (the all-reduce of counts and T)
// and every rank's router_losses and route_backward get that batch. Against ref::route and
// route_backward over all T tokens at once, given the EP d_probs (the same upstream gradient):
//   d_logits: bit for bit. A token's d_logits reads only its logits, d_probs, T and f_i, and
//     T and the counts are integers, summed exactly in any order.
//   aux and z: the ranks' shares summed in rank order within 2(T + E + R + 4)·2^-53 relative.
//     Every term is >= 0, so each side is within n·2^-53 of the exact value for n roundings
//     along its longest chain: one rank T + E + 3 (the P_i or lse² sum, two divisions, the
//     product, the sum over E, two coefficient products), EP up to R more (the shares' sum).
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>
#include <ostream>
#include <string>
#include <tuple>
#include <vector>

#include "common/layer_step.h"
#include "dist/ep_plan.h"
#include "ref/dispatch.h"
#include "ref/ep.h"
#include "ref/router.h"
#include "ref_test_helpers.h"

namespace moefuse::test {
namespace {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

struct EpCase {
  const char* name;
  Activation activation;
  RouterKind router;
  int64_t ffn, top_k;
  bool expert_bias, losses;  // losses: the aux and z losses on
};

void PrintTo(const EpCase& c, std::ostream* os) { *os << c.name; }

MoeConfig ep_config(const EpCase& p) {
  MoeConfig c{.hidden = 64, .ffn = p.ffn, .num_experts = 16, .top_k = p.top_k,
              .activation = p.activation, .expert_bias = p.expert_bias};
  c.router = {.kind = p.router, .renormalize = p.router == RouterKind::kSigmoidGroupTopK,
              .routed_scaling_factor = 1.5f};
  if (p.router == RouterKind::kSigmoidGroupTopK)
    c.router.num_groups = 4, c.router.topk_groups = 2, c.router.use_score_bias = true;
  if (p.losses) c.router.aux_loss_coeff = 0.1f, c.router.z_loss_coeff = 0.01f;
  return c;
}

// One rank as a source: its tokens, their routing and rows in its own permuted layout.
struct Source {
  int64_t T = 0, rows = 0;
  std::vector<float> x, dy, logits, probs, xs, ys, y, dys, d_probs, dxs, dx, d_logits, d_w_router;
  std::vector<int32_t> idx, counts, offsets, row_of, token_of_row;
};

// One rank as an owner of El experts: the rows it received ([capacity, ...], NaN past them).
struct Owner {
  std::vector<float> recv, pre, act, ys, dys, dxs;
  std::vector<int32_t> offsets;
};

// Every rank's [rows, width] view of one of its buffers.
template <class Rank>
std::vector<TensorView> views(std::vector<Rank>& ranks, std::vector<float> Rank::*buffer,
                              int64_t width) {
  std::vector<TensorView> out;
  for (Rank& r : ranks)
    out.push_back(f32(r.*buffer, {static_cast<int64_t>((r.*buffer).size()) / width, width}));
  return out;
}

TensorView optional(std::vector<float>& v, std::initializer_list<int64_t> shape) {
  return v.empty() ? TensorView{} : f32(v, shape);
}

// The EP step's results, concatenated in rank order (y, dx, d_probs, d_logits) or assembled
// from the owners' slices (expert gradients, NaN where no rank wrote); the ranks' loss shares
// summed in rank order.
struct EpStep {
  std::vector<float> y, dx, d_probs, d_logits, d_w1, d_b1, d_w2, d_b2, d_w_router;
  std::vector<double> d_w_router_abs;  // Σ_s |rank s's partial d_w_router|
  double aux_loss = 0, z_loss = 0;
};

EpStep run_ep(LayerData d, const std::vector<int64_t>& tokens) {
  const MoeConfig& c = d.c;
  const int R = static_cast<int>(tokens.size());
  const int64_t E = c.num_experts, H = c.hidden, F = c.ffn, fc1 = c.fc1_width(), k = c.top_k;
  const int64_t max_tokens = *std::max_element(tokens.begin(), tokens.end());
  const dist::EpPlan plan = dist::make_ep_plan(
      {.experts = static_cast<int>(E), .ranks = R, .max_tokens_per_rank = max_tokens,
       .top_k = static_cast<int>(k)});
  const int64_t El = plan.experts_per_rank, cap = plan.receive_capacity_rows;
  const MoeConfig local = ref::ep_expert_config(c, R);
  const TensorView w_router = f32(d.w_router, {E, H}), score_bias = optional(d.score_bias, {E});
  const ref::ExpertWeights w{.w1 = f32(d.w1, {E, fc1, H}), .b1 = optional(d.b1, {E, fc1}),
                             .w2 = f32(d.w2, {E, H, F}), .b2 = optional(d.b2, {E, H})};
  EpStep out;
  out.d_w1.assign(d.w1.size(), kNaN), out.d_b1.assign(d.b1.size(), kNaN);
  out.d_w2.assign(d.w2.size(), kNaN), out.d_b2.assign(d.b2.size(), kNaN);
  out.d_w_router.resize(E * H), out.d_w_router_abs.resize(E * H);
  const ref::ExpertGrads g{.w1 = f32(out.d_w1, {E, fc1, H}), .b1 = optional(out.d_b1, {E, fc1}),
                           .w2 = f32(out.d_w2, {E, H, F}), .b2 = optional(out.d_b2, {E, H})};

  // Each source routes and permutes its own tokens as one GPU does.
  std::vector<Source> src(R);
  std::vector<int32_t> gathered;
  for (int64_t s = 0, t0 = 0; s < R; t0 += tokens[s++]) {
    Source& r = src[s];
    const int64_t T = r.T = tokens[s];
    r.x.assign(d.x.begin() + t0 * H, d.x.begin() + (t0 + T) * H);
    r.dy.assign(d.dy.begin() + t0 * H, d.dy.begin() + (t0 + T) * H);
    r.logits.resize(T * E), r.idx.resize(T * k), r.probs.resize(T * k), r.counts.resize(E);
    ref::router_logits(f32(r.x, {T, H}), w_router, f32(r.logits, {T, E}));
    ref::route(c.router, k, f32(r.logits, {T, E}), score_bias, i32(r.idx, {T, k}),
               f32(r.probs, {T, k}), i32(r.counts, {E}));
    r.offsets.resize(E + 1);
    r.rows = ref::expert_offsets(i32(r.counts, {E}), i32(r.offsets, {E + 1}));
    r.row_of.resize(T * k), r.token_of_row.resize(r.rows), r.xs.resize(r.rows * H);
    ref::dispatch_maps(i32(r.idx, {T, k}), i32(r.offsets, {E + 1}), i32(r.row_of, {T, k}),
                       i32(r.token_of_row, {r.rows}));
    ref::permute(f32(r.x, {T, H}), i32(r.token_of_row, {r.rows}), f32(r.xs, {r.rows, H}));
    r.ys.resize(r.rows * H), r.dys.resize(r.rows * H), r.dxs.resize(r.rows * H);
    gathered.insert(gathered.end(), r.offsets.begin(), r.offsets.end());
  }
  // The all-reduce of the routing statistics, then each rank's share of the losses.
  ref::RouterBatch batch{.counts = std::vector<int64_t>(E)};
  for (Source& r : src) {
    const ref::RouterBatch part = ref::router_batch_part(r.T, i32(r.counts, {E}));
    batch.tokens += part.tokens;
    for (int64_t e = 0; e < E; ++e) batch.counts[e] += part.counts[e];
  }
  for (Source& r : src) {
    const ref::RouterLosses share =
        ref::router_losses(c.router, k, f32(r.logits, {r.T, E}), i32(r.counts, {E}), batch);
    out.aux_loss += share.aux_loss, out.z_loss += share.z_loss;
  }
  const TensorView offsets = i32(gathered, {R, E + 1});
  std::vector<Owner> own(R);
  std::vector<TensorView> recv_offsets;
  for (Owner& o : own) {
    o.recv.assign(cap * H, kNaN), o.pre.assign(cap * fc1, kNaN), o.act.assign(cap * F, kNaN);
    o.ys.assign(cap * H, kNaN), o.dys.assign(cap * H, kNaN), o.dxs.assign(cap * H, kNaN);
    o.offsets.resize(El + 1);
    recv_offsets.push_back(i32(o.offsets, {El + 1}));
  }

  // Forward: out to the owners, their experts, back, and each source's combine.
  ref::ep_dispatch(offsets, views(src, &Source::xs, H), views(own, &Owner::recv, H), recv_offsets);
  for (int o = 0; o < R; ++o)
    ref::expert_mlp_forward(local, f32(own[o].recv, {cap, H}), recv_offsets[o],
                            ref::ep_expert_slice(w, R, o), f32(own[o].pre, {cap, fc1}),
                            f32(own[o].act, {cap, F}), f32(own[o].ys, {cap, H}));
  ref::ep_return(offsets, views(own, &Owner::ys, H), views(src, &Source::ys, H));
  for (Source& r : src) {
    r.y.resize(r.T * H);
    ref::combine(f32(r.ys, {r.rows, H}), f32(r.probs, {r.T, k}), i32(r.row_of, {r.T, k}),
                 f32(r.y, {r.T, H}));
    out.y.insert(out.y.end(), r.y.begin(), r.y.end());
  }

  // Backward: dys out to the owners, their experts' backward (the weight gradients land in
  // their slices), dxs back, then each source's permute and router backward.
  for (Source& r : src) {
    r.d_probs.resize(r.T * k);
    ref::combine_backward(f32(r.dy, {r.T, H}), f32(r.ys, {r.rows, H}), f32(r.probs, {r.T, k}),
                          i32(r.row_of, {r.T, k}), f32(r.dys, {r.rows, H}),
                          f32(r.d_probs, {r.T, k}));
  }
  ref::ep_dispatch(offsets, views(src, &Source::dys, H), views(own, &Owner::dys, H),
                   recv_offsets);
  for (int o = 0; o < R; ++o)
    ref::expert_mlp_backward(local, f32(own[o].recv, {cap, H}), recv_offsets[o],
                             ref::ep_expert_slice(w, R, o), f32(own[o].pre, {cap, fc1}),
                             f32(own[o].dys, {cap, H}), f32(own[o].dxs, {cap, H}),
                             ref::ep_expert_slice(g, R, o));
  ref::ep_return(offsets, views(own, &Owner::dxs, H), views(src, &Source::dxs, H));
  for (Source& r : src) {
    const int64_t T = r.T;
    r.dx.resize(T * H), r.d_logits.resize(T * E), r.d_w_router.resize(E * H);
    ref::permute_backward(f32(r.dxs, {r.rows, H}), i32(r.row_of, {T, k}), f32(r.dx, {T, H}));
    ref::route_backward(c.router, k, f32(r.logits, {T, E}), i32(r.idx, {T, k}),
                        i32(r.counts, {E}), f32(r.d_probs, {T, k}), f32(r.d_logits, {T, E}),
                        batch);
    ref::router_logits_backward(f32(r.x, {T, H}), w_router, f32(r.d_logits, {T, E}),
                                f32(r.dx, {T, H}), f32(r.d_w_router, {E, H}));
    out.dx.insert(out.dx.end(), r.dx.begin(), r.dx.end());
    out.d_probs.insert(out.d_probs.end(), r.d_probs.begin(), r.d_probs.end());
    out.d_logits.insert(out.d_logits.end(), r.d_logits.begin(), r.d_logits.end());
    for (int64_t i = 0; i < E * H; ++i) {  // the all-reduce, in fp32
      out.d_w_router[i] += r.d_w_router[i];
      out.d_w_router_abs[i] += std::abs(r.d_w_router[i]);
    }
  }
  return out;
}

void expect_bitwise(const std::string& name, const std::vector<float>& got,
                    const std::vector<float>& want) {
  ASSERT_EQ(got.size(), want.size()) << name;
  for (size_t i = 0; i < got.size(); ++i)
    if (std::bit_cast<uint32_t>(got[i]) != std::bit_cast<uint32_t>(want[i])) {
      ADD_FAILURE() << name << " differs first at flat index " << i << ": EP " << got[i]
                    << ", one rank " << want[i];
      return;
    }
}

// The one-rank router on all T tokens: its losses and its d_logits from `d_probs` [T, k].
struct RouterStep {
  ref::RouterLosses losses;
  std::vector<float> d_logits;
};

RouterStep one_rank_router(LayerData d, std::vector<float> d_probs) {
  const MoeConfig& c = d.c;
  const int64_t T = d.T, E = c.num_experts, H = c.hidden, k = c.top_k;
  std::vector<float> logits(T * E), probs(T * k);
  std::vector<int32_t> idx(T * k), counts(E);
  ref::router_logits(f32(d.x, {T, H}), f32(d.w_router, {E, H}), f32(logits, {T, E}));
  RouterStep out{.losses = ref::route(c.router, k, f32(logits, {T, E}),
                                      optional(d.score_bias, {E}), i32(idx, {T, k}),
                                      f32(probs, {T, k}), i32(counts, {E})),
                 .d_logits = std::vector<float>(T * E)};
  ref::route_backward(c.router, k, f32(logits, {T, E}), i32(idx, {T, k}), i32(counts, {E}),
                      f32(d_probs, {T, k}), f32(out.d_logits, {T, E}));
  return out;
}

// Per-rank token counts in [0, 20]: at R = 2 a rank of one; from R = 4 also a rank of none (at
// R = 2 that would leave one sender, whose order any layout keeps).
std::vector<int64_t> token_counts(int R) {
  std::uniform_int_distribution<int64_t> count(1, 20);
  std::vector<int64_t> t(R);
  for (auto& v : t) v = count(rng());
  if (R >= 2) t[rng()() % R] = 1;
  if (R >= 4) {
    const size_t one = std::find(t.begin(), t.end(), 1) - t.begin();
    t[(one + 1 + rng()() % (R - 1)) % R] = 0;
  }
  return t;
}

class EpLayer : public testing::TestWithParam<std::tuple<EpCase, int>> {};

TEST_P(EpLayer, MatchesOneRank) {
  const auto& [ep_case, R] = GetParam();
  const MoeConfig c = ep_config(ep_case);
  for (int draw = 0; draw < 3; ++draw) {
    const std::vector<int64_t> tokens = token_counts(R);
    std::string counts;
    for (int64_t t : tokens) counts += std::to_string(t) + " ";
    SCOPED_TRACE("tokens per rank: " + counts);
    int64_t T = 0;
    for (int64_t t : tokens) T += t;
    const LayerData d = LayerData::random(c, T);
    const StepResult want = reference_step(d);
    const EpStep got = run_ep(d, tokens);
    expect_bitwise("y", got.y, want.at("y"));
    expect_bitwise("dx", got.dx, want.at("dx"));
    expect_bitwise("d_w1", got.d_w1, want.at("d_w1"));
    expect_bitwise("d_w2", got.d_w2, want.at("d_w2"));
    expect_bitwise("d_b1", got.d_b1, want.at("d_b1"));
    expect_bitwise("d_b2", got.d_b2, want.at("d_b2"));
    const RouterStep router = one_rank_router(d, got.d_probs);
    expect_bitwise("d_logits", got.d_logits, router.d_logits);
    const double losses_bound = 2.0 * double(T + c.num_experts + R + 4) * 0x1p-53;
    EXPECT_LE(std::abs(got.aux_loss - router.losses.aux_loss),
              losses_bound * router.losses.aux_loss)
        << "aux: EP " << got.aux_loss << ", one rank " << router.losses.aux_loss;
    EXPECT_LE(std::abs(got.z_loss - router.losses.z_loss), losses_bound * router.losses.z_loss)
        << "z: EP " << got.z_loss << ", one rank " << router.losses.z_loss;
    EXPECT_EQ(got.aux_loss > 0, c.router.aux_loss_coeff > 0);  // the losses on where meant
    const std::vector<float>& dwr = want.at("d_w_router");
    ASSERT_EQ(got.d_w_router.size(), dwr.size());
    for (size_t i = 0; i < dwr.size(); ++i)
      ASSERT_LE(std::abs(double(got.d_w_router[i]) - dwr[i]),
                (R + 2) * 0x1p-24 * got.d_w_router_abs[i])
          << "d_w_router[" << i << "]: EP " << got.d_w_router[i] << ", one rank " << dwr[i];
  }
}

constexpr EpCase kCases[] = {
    {"swiglu_softmax_k2_bias_losses", Activation::kSwiGLU, RouterKind::kSoftmaxTopK, 32, 2,
     true, true},
    {"clamped_swiglu_sigmoid_group_k4_losses", Activation::kClampedSwiGLU,
     RouterKind::kSigmoidGroupTopK, 64, 4, false, true},
    {"squared_relu_softmax_k4_bias", Activation::kSquaredReLU, RouterKind::kSoftmaxTopK, 32, 4,
     true, false},
};

INSTANTIATE_TEST_SUITE_P(All, EpLayer,
                         testing::Combine(testing::ValuesIn(kCases), testing::Values(1, 2, 4, 8)),
                         [](const auto& info) {
                           return std::string(std::get<0>(info.param).name) + "_R" +
                                  std::to_string(std::get<1>(info.param));
                         });

}  // namespace
}  // namespace moefuse::test
