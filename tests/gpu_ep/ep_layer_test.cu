// The MoE layer's forward and backward under expert parallelism on the GPUs of this machine (one
// thread per rank, ep_harness.h), compared bit for bit with the same layer on one GPU for all
// ranks' tokens concatenated in rank order.
//
// Forward: each rank routes its own tokens over all E experts, permutes them, EpComm::dispatch
// sends the rows to their experts' owners, the owner runs FC1 + SwiGLU (saving the
// pre-activation) and FC2 over its El = E / R experts, EpComm::return_rows brings the outputs
// back and the rank combines its tokens with their routing weights.
// Backward, from a random dy per rank: combine_backward gives dys (in the rank's permuted layout)
// and d_probs; EpComm::dispatch sends dys to the owners along the forward's map; the owner runs
// the FC2 dgrad with dGLU (d_pre, act), the FC1 dgrad (dxs) and the k-grouped wgrads of its
// experts (dW2 = Σ dysᵀ·act, dW1 = Σ d_preᵀ·xs); EpComm::return_rows brings dxs back and
// permute_backward sums each token's k rows into dx. A dispatch overwrites received(), so the
// owner copies the forward's received xs (dW1's operand) aside first.
//
// Why every result is bitwise that of one GPU:
// - the router is one warp per token (router_topk.cu); combine, combine_backward (d_probs by a
//   fixed reduction tree) and permute_backward are one warp per token, summing its k rows in j
//   order: a token's probabilities, y, d_probs and dx depend on that token's data only;
// - the owner receives expert e's rows in the one-GPU order of the concatenated batch
//   (dist/ep_layout.h), so every row sits at the same index inside its expert, hence at the same
//   row of the same m-block tile, as on one GPU; the forward GEMMs and both dgrads compute each
//   row of a tile from that row of A and the expert's weight alone, over the same K blocks in
//   the same order;
// - the wgrad (gemm/backward/wgrad_kernel.cuh) has no split-K and no atomics: one CTA sums all
//   of expert e's rows for an output tile, in 64-row K blocks counted from the expert's first
//   row (rows past the expert zeroed), so how the sum is split and ordered depends on the
//   expert's row count alone, and the owner holds one GPU's rows of e in one GPU's order.
// The one exception is the logits GEMM: cuBLAS picks its algorithm (tiling, split-K) from the
// shape, so a token's logits may depend on the batch size T. The one-GPU layer therefore runs
// router_logits per rank's tokens (the shapes each rank runs) and everything after it on the
// concatenated batch; expert parallelism does not touch the router (it is data-parallel).
// Not covered: the router's backward (d_logits, d_w_router). d_w_router sums over every rank's
// tokens, so under expert parallelism it needs an all-reduce across ranks, which is not built.
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <gtest/gtest.h>
#include <nccl.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "common/test_util.h"
#include "cuda/check.h"
#include "dist/nccl/ep_comm.h"
#include "gpu/dispatch_test_util.h"
#include "gpu_ep/ep_harness.h"
#include "moefuse/dispatch.h"
#include "moefuse/grouped_gemm.h"
#include "moefuse/grouped_gemm_backward.h"
#include "moefuse/health.h"
#include "moefuse/router.h"

namespace moefuse {
namespace {

using test::Bf16;
using test::DeviceBuffer;

struct Shape {
  int experts_per_rank;
  int64_t hidden, ffn, top_k;
};

// All ranks' tokens concatenated in rank order, the loss's gradient of y and the full weights,
// on the host.
struct Inputs {
  std::vector<int64_t> tokens, first;  // per rank: its T_s and its first token in the batch
  int64_t total = 0, max_tokens = 0;
  std::vector<Bf16> x;         // [total, H]
  std::vector<Bf16> dy;        // [total, H]
  std::vector<Bf16> w_router;  // [E, H], the same on every rank
  std::vector<Bf16> w1;        // [E, 2F, H], GLU-interleaved (grouped_gemm.h)
  std::vector<Bf16> w2;        // [E, H, F]
};

// Uneven token counts, 256 to 1024 a rank (experts of several 128-row tiles, and of several
// 64-row K blocks in the wgrads), except rank 1's single token.
Inputs make_inputs(const Shape& s, int ranks) {
  const int64_t E = s.experts_per_rank * ranks, H = s.hidden, F = s.ffn;
  Inputs in;
  std::uniform_int_distribution<int64_t> count(256, 1024);
  for (int r = 0; r < ranks; ++r) {
    in.tokens.push_back(r == 1 ? 1 : count(test::rng()));
    in.first.push_back(in.total);
    in.total += in.tokens.back();
  }
  in.max_tokens = *std::max_element(in.tokens.begin(), in.tokens.end());
  in.x = test::to_bf16(test::random_normal(in.total * H));
  in.dy = test::to_bf16(test::random_normal(in.total * H));
  // Logits and GEMM outputs of order one for unit-variance x.
  const float by_hidden = 1 / std::sqrt(float(H)), by_ffn = 1 / std::sqrt(float(F));
  in.w_router = test::to_bf16(test::random_normal(E * H, by_hidden));
  std::vector<Bf16> w1 = test::to_bf16(test::random_normal(E * 2 * F * H, by_hidden));
  in.w1.resize(w1.size());
  interleave_glu_weight(test::host_view(w1, DType::kBFloat16, {E, 2 * F, H}),
                        test::host_view(in.w1, DType::kBFloat16, {E, 2 * F, H}));
  in.w2 = test::to_bf16(test::random_normal(E * H * F, by_ffn));
  return in;
}

// Elements [first, first + count) of v.
std::vector<Bf16> slice(const std::vector<Bf16>& v, int64_t first, int64_t count) {
  return std::vector<Bf16>(v.begin() + first, v.begin() + first + count);
}

// A workspace for every call of the layer on T tokens (they run one after another on one
// stream, so they can share it).
size_t workspace_bytes(int64_t T, int64_t E) {
  return std::max({router_logits_workspace_size(), router_topk_workspace_size(T, E),
                   dispatch_maps_workspace_size(T, E)});
}

// The extents of one rank's layer (or of the one-GPU layer): T tokens routed over E experts into
// `permuted` rows (at least T·k), and `gemm_rows` rows through the GEMMs of `gemm_experts`.
struct Extents {
  int64_t tokens, experts, permuted, gemm_rows, gemm_experts;
};

// Everything one forward and backward write on the current device, all poisoned and the health
// flag reset on `stream`, and dy [T, H] uploaded.
struct LayerBuffers {
  int64_t T, E, k, H, F, permuted, rows, gemm_experts;
  DeviceBuffer<Bf16> dy;
  DeviceBuffer<float> logits, probs, aux_f, aux_P, losses, d_probs, d_w1, d_w2;
  DeviceBuffer<int32_t> expert_idx, counts, offsets, row_of, token_of_row, health;
  DeviceBuffer<Bf16> xs, pre, h, ys, y, dys, act, d_pre, dxs, dx;
  DeviceBuffer<unsigned char> ws;

  LayerBuffers(const Extents& n, const Shape& s, const std::vector<Bf16>& dy_host,
               cudaStream_t stream)
      : T(n.tokens), E(n.experts), k(s.top_k), H(s.hidden), F(s.ffn), permuted(n.permuted),
        rows(n.gemm_rows), gemm_experts(n.gemm_experts), dy(dy_host, stream),
        logits(T * E, stream), probs(T * k, stream), aux_f(E, stream), aux_P(E, stream),
        losses(2, stream), d_probs(T * k, stream), d_w1(gemm_experts * 2 * F * H, stream),
        d_w2(gemm_experts * H * F, stream), expert_idx(T * k, stream), counts(E, stream),
        offsets(E + 1, stream), row_of(T * k, stream), token_of_row(permuted, stream),
        health(1, stream), xs(permuted * H, stream), pre(rows * 2 * F, stream),
        h(rows * F, stream), ys(rows * H, stream), y(T * H, stream), dys(permuted * H, stream),
        act(rows * F, stream), d_pre(rows * 2 * F, stream), dxs(rows * H, stream),
        dx(T * H, stream), ws(workspace_bytes(T, E), stream) {
    for (auto* b : {&logits, &probs, &aux_f, &aux_P, &losses, &d_probs, &d_w1, &d_w2}) b->poison();
    for (auto* b : {&expert_idx, &counts, &offsets, &row_of, &token_of_row}) b->poison(0x7F);
    for (auto* b : {&xs, &pre, &h, &ys, &y, &dys, &act, &d_pre, &dxs, &dx}) b->poison();
    reset_health_flags(health_view(), stream);
  }

  Workspace workspace() const { return {.data = ws.data(), .bytes = ws.size()}; }
  TensorView health_view() const { return health.view(DType::kInt32, {1}); }
  TensorView logits_view() const { return logits.view(DType::kFloat32, {T, E}); }
  TensorView probs_view() const { return probs.view(DType::kFloat32, {T, k}); }
  TensorView row_of_view() const { return row_of.view(DType::kInt32, {T, k}); }
  TensorView token_of_row_view() const { return token_of_row.view(DType::kInt32, {permuted}); }
  TensorView offsets_view() const { return offsets.view(DType::kInt32, {E + 1}); }
  TensorView xs_view() const { return xs.view(DType::kBFloat16, {permuted, H}); }
  TensorView pre_view() const { return pre.view(DType::kBFloat16, {rows, 2 * F}); }
  TensorView ys_view() const { return ys.view(DType::kBFloat16, {rows, H}); }
  TensorView y_view() const { return y.view(DType::kBFloat16, {T, H}); }
  TensorView dy_view() const { return dy.view(DType::kBFloat16, {T, H}); }
  TensorView d_probs_view() const { return d_probs.view(DType::kFloat32, {T, k}); }
  TensorView dys_view() const { return dys.view(DType::kBFloat16, {permuted, H}); }
  TensorView act_view() const { return act.view(DType::kBFloat16, {rows, F}); }
  TensorView d_pre_view() const { return d_pre.view(DType::kBFloat16, {rows, 2 * F}); }
  TensorView dxs_view() const { return dxs.view(DType::kBFloat16, {rows, H}); }
  TensorView dx_view() const { return dx.view(DType::kBFloat16, {T, H}); }
  TensorView d_w1_view() const { return d_w1.view(DType::kFloat32, {gemm_experts, 2 * F, H}); }
  TensorView d_w2_view() const { return d_w2.view(DType::kFloat32, {gemm_experts, H, F}); }
};

// From b.logits: router_topk, dispatch_maps (align 1) and permute of x [T, H] into b.xs.
void route_and_permute(const LayerBuffers& b, const TensorView& x, cudaStream_t stream) {
  router_topk(RouterOptions{}, b.k, b.logits_view(), TensorView{},
              RouterOutputs{.expert_idx = b.expert_idx.view(DType::kInt32, {b.T, b.k}),
                            .probs = b.probs_view(),
                            .counts = b.counts.view(DType::kInt32, {b.E}),
                            .aux_f = b.aux_f.view(DType::kFloat32, {b.E}),
                            .aux_P = b.aux_P.view(DType::kFloat32, {b.E}),
                            .losses = b.losses.view(DType::kFloat32, {2})},
              b.health_view(), b.workspace(), stream);
  dispatch_maps(b.expert_idx.view(DType::kInt32, {b.T, b.k}), b.E, 1,
                DispatchMaps{.offsets = b.offsets_view(), .row_of = b.row_of_view(),
                             .token_of_row = b.token_of_row_view()},
                b.health_view(), b.workspace(), stream);
  permute(x, b.row_of_view(), b.token_of_row_view(), b.xs_view(), b.health_view(), stream);
}

// The experts (w1 [E', 2F, H], w2 [E', H, F]) over rows a [gemm_rows, H] with offsets [E' + 1]:
// b.h = SwiGLU(a · w1ᵀ) with b.pre = a · w1ᵀ kept for the backward, then b.ys = b.h · w2ᵀ
// (unweighted: combine applies the routing weights).
void expert_mlp(const TensorView& a, const TensorView& offsets, const TensorView& w1,
                const TensorView& w2, const LayerBuffers& b, cudaStream_t stream) {
  const TensorView h = b.h.view(DType::kBFloat16, {b.rows, b.F});
  grouped_gemm({.a = a, .b = w1, .offsets = offsets, .d = h,
                .epilogue = GemmEpilogue::kActivation, .activation = Activation::kSwiGLU,
                .pre_activation = b.pre_view()},
               stream);
  grouped_gemm({.a = h, .b = w2, .offsets = offsets, .d = b.ys_view()}, stream);
}

// expert_mlp's backward over the same rows and offsets, from dys (its outputs' gradients) and a
// (its inputs, [gemm_rows, H] each), with b.pre from expert_mlp: the FC2 dgrad with dGLU gives
// b.d_pre and b.act (no routing weight: combine applied it, combine_backward differentiates
// it), then b.dxs = b.d_pre · w1 and the weight gradients, fp32:
// b.d_w2[e] = Σ_r dys[r]ᵀ·act[r] and b.d_w1[e] = Σ_r d_pre[r]ᵀ·a[r] over expert e's rows.
void expert_mlp_backward(const TensorView& dys, const TensorView& a, const TensorView& offsets,
                         const TensorView& w1, const TensorView& w2, const LayerBuffers& b,
                         cudaStream_t stream) {
  grouped_gemm_fc2_dgrad({.dys = dys, .w2 = w2, .offsets = offsets, .pre = b.pre_view(),
                          .d_pre = b.d_pre_view(), .activation = Activation::kSwiGLU,
                          .scaled_act = b.act_view()},
                         Fc2DgradScratch{}, stream);
  grouped_gemm_dgrad({.a = b.d_pre_view(), .b = w1, .offsets = offsets, .d = b.dxs_view()},
                     stream);
  grouped_gemm_wgrad({.a = dys, .b = b.act_view(), .offsets = offsets, .d = b.d_w2_view()},
                     stream);
  grouped_gemm_wgrad({.a = b.d_pre_view(), .b = a, .offsets = offsets, .d = b.d_w1_view()},
                     stream);
}

// combine's backward into b.dys and b.d_probs; ys: the forward's expert outputs in b's permuted
// layout.
void combine_backward_into(const LayerBuffers& b, const TensorView& ys, cudaStream_t stream) {
  combine_backward(b.dy_view(), ys, b.probs_view(), b.row_of_view(), b.token_of_row_view(),
                   b.dys_view(), b.d_probs_view(), b.health_view(), stream);
}

// What a layer leaves on one rank (or on the one GPU): outputs, gradients, flags.
struct Result {
  std::vector<Bf16> y, dx;           // [T, H]
  std::vector<float> d_probs;        // [T, k]
  std::vector<float> d_w1, d_w2;     // the GEMMs' experts: [E', 2F, H], [E', H, F]
  int32_t health = -1, ep_flags = 0;
};

// b's results, after the stream's work (the downloads wait for it).
Result download(const LayerBuffers& b, cudaStream_t stream) {
  return Result{.y = b.y.download(),
                .dx = b.dx.download(),
                .d_probs = b.d_probs.download(),
                .d_w1 = b.d_w1.download(),
                .d_w2 = b.d_w2.download(),
                .health = read_health_flags(b.health_view(), stream)};
}

// The layer on device 0 for all tokens and all E experts.
Result one_gpu_layer(const Shape& s, int64_t E, const Inputs& in) {
  const int64_t T = in.total, H = s.hidden, F = s.ffn, rows = T * s.top_k;
  MOEFUSE_CUDA_CHECK(cudaSetDevice(0));
  cudaStream_t stream = nullptr;
  MOEFUSE_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  cublasHandle_t cublas = nullptr;
  if (cublasCreate(&cublas) != CUBLAS_STATUS_SUCCESS) throw Error("cublasCreate failed");
  Result out;
  {
    const DeviceBuffer<Bf16> x(in.x, stream), w_router(in.w_router, stream), w1(in.w1, stream),
        w2(in.w2, stream);
    DeviceBuffer<float> rank_logits(in.max_tokens * E, stream);
    const LayerBuffers b(
        {.tokens = T, .experts = E, .permuted = rows, .gemm_rows = rows, .gemm_experts = E}, s,
        in.dy, stream);
    const TensorView w1_view = w1.view(DType::kBFloat16, {E, 2 * F, H}),
                     w2_view = w2.view(DType::kBFloat16, {E, H, F});

    // Each rank's logits as that rank computes them: same shape, a fresh buffer as aligned as
    // the rank's, then copied into the batch's logits.
    for (size_t s_rank = 0; s_rank < in.tokens.size(); ++s_rank) {
      const int64_t t = in.tokens[s_rank], first = in.first[s_rank];
      router_logits(cublas,
                    TensorView::contiguous(x.data() + first * H, DType::kBFloat16, {t, H},
                                           Device::kCuda),
                    w_router.view(DType::kBFloat16, {E, H}),
                    rank_logits.view(DType::kFloat32, {t, E}), b.workspace(), stream);
      MOEFUSE_CUDA_CHECK(cudaMemcpyAsync(b.logits.data() + first * E, rank_logits.data(),
                                         t * E * sizeof(float), cudaMemcpyDeviceToDevice, stream));
    }
    route_and_permute(b, x.view(DType::kBFloat16, {T, H}), stream);
    expert_mlp(b.xs_view(), b.offsets_view(), w1_view, w2_view, b, stream);
    combine(b.ys_view(), b.probs_view(), b.row_of_view(), b.y_view(), b.health_view(), stream);

    combine_backward_into(b, b.ys_view(), stream);
    expert_mlp_backward(b.dys_view(), b.xs_view(), b.offsets_view(), w1_view, w2_view, b, stream);
    permute_backward(b.dxs_view(), b.row_of_view(), b.dx_view(), b.health_view(), stream);
    out = download(b, stream);
  }
  cublasDestroy(cublas);
  MOEFUSE_CUDA_CHECK(cudaStreamDestroy(stream));
  return out;
}

// Rank `rank`'s layer on its device: its tokens, its El experts' weights, EpComm in between.
// Every buffer is allocated and uploaded (uploads synchronise) before the first EpComm call, and
// nothing waits on the host between the first dispatch and the end, so every rank launches
// every collective kernel before any rank waits.
Result ep_layer(const Shape& s, const Inputs& in, ncclComm_t comm, int rank, int ranks,
                std::atomic<const char*>& stage) {
  const int64_t E = s.experts_per_rank * ranks, el = s.experts_per_rank, H = s.hidden,
                F = s.ffn, T = in.tokens[rank];
  const dist::EpPlan plan = dist::make_ep_plan(
      {.experts = static_cast<int>(E), .ranks = ranks, .rank = rank,
       .max_tokens_per_rank = in.max_tokens, .top_k = static_cast<int>(s.top_k)});
  const int64_t send_bound = plan.send_rows, capacity = plan.receive_capacity_rows;
  MOEFUSE_CUDA_CHECK(cudaSetDevice(rank));
  cudaStream_t stream = nullptr;
  MOEFUSE_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  cublasHandle_t cublas = nullptr;
  if (cublasCreate(&cublas) != CUBLAS_STATUS_SUCCESS) throw Error("cublasCreate failed");
  Result out;
  {
    stage = "upload";
    const DeviceBuffer<Bf16> x(slice(in.x, in.first[rank] * H, T * H), stream),
        w_router(in.w_router, stream),
        w1(slice(in.w1, rank * el * 2 * F * H, el * 2 * F * H), stream),
        w2(slice(in.w2, rank * el * H * F, el * H * F), stream);
    const LayerBuffers b({.tokens = T,
                          .experts = E,
                          .permuted = send_bound,
                          .gemm_rows = capacity,
                          .gemm_experts = el},
                         s, slice(in.dy, in.first[rank] * H, T * H), stream);
    const TensorView w1_view = w1.view(DType::kBFloat16, {el, 2 * F, H}),
                     w2_view = w2.view(DType::kBFloat16, {el, H, F});
    // The forward's received rows, dW1's operand, kept past the backward's dispatch.
    DeviceBuffer<Bf16> xs_received(capacity * H, stream);
    xs_received.poison();

    stage = "construct";
    dist::EpComm ep(comm, plan, static_cast<int>(H));
    for (const TensorView& t : {ep.received(), ep.receive_offsets(), ep.returned()})
      MOEFUSE_CUDA_CHECK(cudaMemsetAsync(t.data, 0xFF, size_t(byte_span(t)), stream));
    reset_health_flags(ep.flags(), stream);

    stage = "forward";
    router_logits(cublas, x.view(DType::kBFloat16, {T, H}),
                  w_router.view(DType::kBFloat16, {E, H}), b.logits_view(), b.workspace(), stream);
    route_and_permute(b, x.view(DType::kBFloat16, {T, H}), stream);
    ep.dispatch(b.xs_view(), b.offsets_view(), stream);
    MOEFUSE_CUDA_CHECK(cudaMemcpyAsync(xs_received.data(), ep.received().data,
                                       size_t(byte_span(ep.received())),
                                       cudaMemcpyDeviceToDevice, stream));
    expert_mlp(ep.received(), ep.receive_offsets(), w1_view, w2_view, b, stream);
    ep.return_rows(b.ys_view(), stream);
    combine(ep.returned(), b.probs_view(), b.row_of_view(), b.y_view(), b.health_view(), stream);

    stage = "backward";
    combine_backward_into(b, ep.returned(), stream);
    // The same offsets as the forward's: receive_offsets() comes out the same.
    ep.dispatch(b.dys_view(), b.offsets_view(), stream);
    expert_mlp_backward(ep.received(), xs_received.view(DType::kBFloat16, {capacity, H}),
                        ep.receive_offsets(), w1_view, w2_view, b, stream);
    ep.return_rows(b.dxs_view(), stream);
    permute_backward(ep.returned(), b.row_of_view(), b.dx_view(), b.health_view(), stream);
    stage = "wait for the kernels";
    MOEFUSE_CUDA_CHECK(cudaStreamSynchronize(stream));

    stage = "download";
    out = download(b, stream);
    out.ep_flags = read_health_flags(ep.flags(), stream);
    stage = "destroy";
  }
  cublasDestroy(cublas);
  MOEFUSE_CUDA_CHECK(cudaStreamDestroy(stream));
  return out;
}

float value(Bf16 v) { return __bfloat162float(v); }
float value(float v) { return v; }

template <class T>
bool finite(const std::vector<T>& v) {
  return std::all_of(v.begin(), v.end(), [](T e) { return std::isfinite(value(e)); });
}

// got, `rows` rows of `width` elements, against as many of want from element `first`, bit for
// bit; names the first differing element.
template <class T>
void expect_same_bits(const std::vector<T>& got, const std::vector<T>& want, int64_t first,
                      int64_t rows, int64_t width, const char* what) {
  ASSERT_EQ(int64_t(got.size()), rows * width) << what;
  ASSERT_LE(first + rows * width, int64_t(want.size())) << what;
  const T* w = want.data() + first;
  if (std::memcmp(got.data(), w, got.size() * sizeof(T)) == 0) return;
  for (int64_t i = 0; i < int64_t(got.size()); ++i)
    if (std::memcmp(&got[i], &w[i], sizeof(T)) != 0) {
      ADD_FAILURE() << what << " differs first at row " << i / width << " (one GPU's row "
                    << (first + i) / width << "), column " << i % width << ": " << value(got[i])
                    << " vs one GPU's " << value(w[i]);
      return;
    }
}

// The layer on every rank count (test::rank_counts), each with fresh inputs. Each rank's y, dx
// and d_probs are its tokens' rows of one GPU's, each owner's dW1 and dW2 its experts' slices.
void expect_matches_one_gpu(int gpus, const Shape& s) {
  SCOPED_TRACE("seed " + std::to_string(test::seed()));
  const int64_t el = s.experts_per_rank, H = s.hidden, F = s.ffn, k = s.top_k;
  for (int ranks : test::rank_counts(gpus)) {
    SCOPED_TRACE("ranks " + std::to_string(ranks));
    const Inputs in = make_inputs(s, ranks);
    const Result want = one_gpu_layer(s, el * ranks, in);
    ASSERT_EQ(want.health, 0);
    // Poison is NaN: a finite one-GPU result shows every element was written.
    ASSERT_TRUE(finite(want.y) && finite(want.dx) && finite(want.d_probs) &&
                finite(want.d_w1) && finite(want.d_w2))
        << "the one-GPU layer left a NaN or an infinity";

    std::vector<Result> got(ranks);
    std::vector<ncclComm_t> comms = test::make_comms(ranks);
    test::run_ranks(ranks, [&](int rank, std::atomic<const char*>& stage) {
      got[rank] = ep_layer(s, in, comms[rank], rank, ranks, stage);
      ncclCommDestroy(comms[rank]);
    });
    for (int rank = 0; rank < ranks; ++rank) {
      SCOPED_TRACE("rank " + std::to_string(rank) + " of " + std::to_string(in.tokens[rank]) +
                   " tokens");
      const Result& r = got[rank];
      const int64_t t = in.tokens[rank], first = in.first[rank];
      EXPECT_EQ(r.health, 0);
      EXPECT_EQ(r.ep_flags, 0);
      expect_same_bits(r.y, want.y, first * H, t, H, "y");
      expect_same_bits(r.dx, want.dx, first * H, t, H, "dx");
      expect_same_bits(r.d_probs, want.d_probs, first * k, t, k, "d_probs");
      // A weight gradient's row: local expert · rows per expert + the row in the expert.
      expect_same_bits(r.d_w1, want.d_w1, rank * el * 2 * F * H, el * 2 * F, H, "dW1");
      expect_same_bits(r.d_w2, want.d_w2, rank * el * H * F, el * H, F, "dW2");
    }
  }
}

// 8 experts a rank, top-2: FC1, FC2 and both dgrads one n-block each.
TEST(EpLayerGpu, Top2MatchesOneGpuBitwise) {
  MOEFUSE_REQUIRE_HOPPER_GPUS(gpus);
  expect_matches_one_gpu(gpus, {.experts_per_rank = 8, .hidden = 256, .ffn = 128, .top_k = 2});
}

// 4 experts a rank, top-4, wider: two n-blocks in FC1 (2F = 512), in FC2 and the FC1 dgrad
// (H = 512) and in dW1.
TEST(EpLayerGpu, Top4MatchesOneGpuBitwise) {
  MOEFUSE_REQUIRE_HOPPER_GPUS(gpus);
  expect_matches_one_gpu(gpus, {.experts_per_rank = 4, .hidden = 512, .ffn = 256, .top_k = 4});
}

}  // namespace
}  // namespace moefuse
