// EpMoeLayer (moefuse/ep_layer.h) on the GPUs of this machine (one thread per rank,
// ep_harness.h), compared bit for bit with the same layer on one GPU for all ranks' tokens
// concatenated in rank order, written here from the library's ops.
//
// Each rank routes its own tokens over all E experts, permutes them, dispatches the rows to their
// experts' owners, which run FC1 + SwiGLU (saving the pre-activation) and FC2 over their
// El = E / R experts; the outputs return and the rank combines its tokens with their routing
// weights. The backward from a random dy runs the same path in reverse (docs/ep.md), then the
// router's backward on the rank's tokens.
//
// Why every result is bitwise that of one GPU:
// - the router is data-parallel: each rank's logits GEMM, top-k, aux and z losses and their
//   backward see its own tokens only. The one-GPU layer runs those per rank's tokens too, in
//   fresh buffers of the rank's shapes: cuBLAS chooses its algorithm (tiling, split-K) from the
//   shape, so a token's logits and d_w_router may depend on T;
// - combine, combine_backward (d_probs by a fixed reduction tree) and permute_backward are one
//   warp per token, summing its k rows in j order: a token's y, d_probs and dx depend on that
//   token's data only;
// - the owner receives expert e's rows in the one-GPU order of the concatenated batch
//   (dist/ep_layout.h), so every row sits at the same index inside its expert, hence at the same
//   row of the same m-block tile, as on one GPU; the forward GEMMs and both dgrads compute each
//   row of a tile from that row of A and the expert's weight alone, over the same K blocks in
//   the same order;
// - the wgrad (gemm/backward/wgrad_kernel.cuh) has no split-K and no atomics: one CTA sums all
//   of expert e's rows for an output tile, in 64-row K blocks counted from the expert's first
//   row, so how the sum is split and ordered depends on the expert's row count alone, and the
//   owner holds one GPU's rows of e in one GPU's order.
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <gtest/gtest.h>
#include <nccl.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <deque>
#include <random>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/fp8_operands.h"
#include "common/test_util.h"
#include "cuda/check.h"
#include "dist/nccl/ep_comm.h"
#include "gpu/dispatch_test_util.h"
#include "gpu_ep/ep_harness.h"
#include "moefuse/dispatch.h"
#include "moefuse/ep_layer.h"
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

// The layer's config for R ranks: SwiGLU, softmax top-k with the aux and z losses on.
MoeConfig config_for(const Shape& s, int ranks) {
  MoeConfig c{.hidden = s.hidden, .ffn = s.ffn, .num_experts = s.experts_per_rank * ranks,
              .top_k = s.top_k, .activation = Activation::kSwiGLU};
  c.router.aux_loss_coeff = 0.01f;
  c.router.z_loss_coeff = 0.001f;
  return c;
}

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
// 64-row K blocks in the wgrads), except rank 1's single token. fp8_exact: x's rows are ones the
// FP8 dispatch carries losslessly (test::fp8_exact_rows).
Inputs make_inputs(const MoeConfig& c, int ranks, bool fp8_exact = false) {
  const int64_t E = c.num_experts, H = c.hidden, F = c.ffn;
  Inputs in;
  std::uniform_int_distribution<int64_t> count(256, 1024);
  for (int r = 0; r < ranks; ++r) {
    in.tokens.push_back(r == 1 ? 1 : count(test::rng()));
    in.first.push_back(in.total);
    in.total += in.tokens.back();
  }
  in.max_tokens = *std::max_element(in.tokens.begin(), in.tokens.end());
  in.x = test::to_bf16(fp8_exact ? test::fp8_exact_rows(in.total, H)
                                 : test::random_normal(in.total * H));
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
template <class T>
std::vector<T> slice(const std::vector<T>& v, int64_t first, int64_t count) {
  return std::vector<T>(v.begin() + first, v.begin() + first + count);
}

// What the layer leaves on one rank, or the one-GPU layer for all ranks' tokens (then losses and
// d_w_router hold every rank's, one after another).
struct Result {
  std::vector<Bf16> y, dx;           // [T, H]
  std::vector<float> losses;         // [2] a rank
  std::vector<float> d_w_router;     // [E, H] a rank
  std::vector<float> d_w1, d_w2;     // the experts held: [E', 2F, H], [E', H, F]
  int32_t health = -1, ep_flags = 0;
};

// One rank's router on the one GPU, in fresh buffers of that rank's shapes (T_s tokens): the
// forward's logits, choices and statistics, then the backward into d_logits and d_w_router (the
// layer adds d_logits·Wr to dx inside permute_backward_router).
struct RankRouter {
  int64_t T, E, k, H;
  DeviceBuffer<Bf16> x;
  DeviceBuffer<float> logits, probs, aux_f, aux_P, losses, d_probs, d_logits, d_w_router;
  DeviceBuffer<int32_t> expert_idx, counts;
  DeviceBuffer<unsigned char> ws;

  RankRouter(const MoeConfig& c, const std::vector<Bf16>& x_rows, cudaStream_t stream)
      : T(int64_t(x_rows.size()) / c.hidden), E(c.num_experts), k(c.top_k), H(c.hidden),
        x(x_rows, stream), logits(T * E, stream), probs(T * k, stream), aux_f(E, stream),
        aux_P(E, stream), losses(2, stream), d_probs(T * k, stream), d_logits(T * E, stream),
        d_w_router(E * H, stream), expert_idx(T * k, stream), counts(E, stream),
        ws(std::max({router_logits_backward_workspace_size(T, E),
                     router_topk_workspace_size(T, E)}),
           stream) {}

  Workspace workspace() const { return {.data = ws.data(), .bytes = ws.size()}; }
  TensorView x_view() const { return x.view(DType::kBFloat16, {T, H}); }
  TensorView logits_view() const { return logits.view(DType::kFloat32, {T, E}); }
  TensorView idx_view() const { return expert_idx.view(DType::kInt32, {T, k}); }
  TensorView counts_view() const { return counts.view(DType::kInt32, {E}); }

  void forward(const MoeConfig& c, cublasHandle_t cublas, const TensorView& w_router,
               const TensorView& health, cudaStream_t stream) {
    router_logits(cublas, x_view(), w_router, logits_view(), workspace(), stream);
    router_topk(c.router, k, logits_view(), TensorView{},
                RouterOutputs{.expert_idx = idx_view(),
                              .probs = probs.view(DType::kFloat32, {T, k}),
                              .counts = counts_view(),
                              .aux_f = aux_f.view(DType::kFloat32, {E}),
                              .aux_P = aux_P.view(DType::kFloat32, {E}),
                              .losses = losses.view(DType::kFloat32, {2})},
                health, workspace(), stream);
  }
  // d_probs uploaded first.
  void backward(const MoeConfig& c, cublasHandle_t cublas, const TensorView& w_router,
                cudaStream_t stream) {
    router_topk_backward(c.router, k, logits_view(), idx_view(), counts_view(),
                         d_probs.view(DType::kFloat32, {T, k}), TensorView{},
                         d_logits.view(DType::kFloat32, {T, E}), stream);
    router_logits_backward(cublas, x_view(), w_router, d_logits.view(DType::kFloat32, {T, E}),
                           TensorView{}, d_w_router.view(DType::kFloat32, {E, H}), workspace(),
                           stream);
  }
};

template <class T>
void copy_rows(T* dst, const T* src, int64_t count, cudaStream_t stream) {
  MOEFUSE_CUDA_CHECK(
      cudaMemcpyAsync(dst, src, count * sizeof(T), cudaMemcpyDeviceToDevice, stream));
}

// The layer on device 0 for all tokens and all E experts, from the library's ops: the router per
// rank's tokens (RankRouter), everything else on the concatenated batch.
Result one_gpu_layer(const MoeConfig& c, const Inputs& in) {
  const int64_t T = in.total, E = c.num_experts, k = c.top_k, H = c.hidden, F = c.ffn,
                R = T * k;
  MOEFUSE_CUDA_CHECK(cudaSetDevice(0));
  cudaStream_t stream = nullptr;
  MOEFUSE_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  cublasHandle_t cublas = nullptr;
  if (cublasCreate(&cublas) != CUBLAS_STATUS_SUCCESS) throw Error("cublasCreate failed");
  Result out;
  {
    const DeviceBuffer<Bf16> x(in.x, stream), dy(in.dy, stream), w_router(in.w_router, stream),
        w1(in.w1, stream), w2(in.w2, stream);
    DeviceBuffer<float> probs(R, stream), d_probs(R, stream), d_logits(T * E, stream),
        d_w1(E * 2 * F * H, stream), d_w2(E * H * F, stream);
    DeviceBuffer<int32_t> expert_idx(R, stream), offsets(E + 1, stream), row_of(R, stream),
        token_of_row(R, stream), health(1, stream);
    DeviceBuffer<Bf16> xs(R * H, stream), pre(R * 2 * F, stream), h(R * F, stream),
        ys(R * H, stream), y(T * H, stream), dys(R * H, stream), act(R * F, stream),
        d_pre(R * 2 * F, stream), dxs(R * H, stream), dx(T * H, stream);
    DeviceBuffer<unsigned char> ws(dispatch_maps_workspace_size(T, E), stream);
    for (auto* b : {&xs, &pre, &h, &ys, &y, &dys, &act, &d_pre, &dxs, &dx}) b->poison();
    for (auto* b : {&probs, &d_probs, &d_w1, &d_w2}) b->poison();
    const TensorView health_v = health.view(DType::kInt32, {1});
    reset_health_flags(health_v, stream);
    const TensorView wr = w_router.view(DType::kBFloat16, {E, H}),
                     w1_v = w1.view(DType::kBFloat16, {E, 2 * F, H}),
                     w2_v = w2.view(DType::kBFloat16, {E, H, F});
    auto bf = [](const DeviceBuffer<Bf16>& b, int64_t rows, int64_t cols) {
      return b.view(DType::kBFloat16, {rows, cols});
    };
    const TensorView idx_v = expert_idx.view(DType::kInt32, {T, k}),
                     probs_v = probs.view(DType::kFloat32, {T, k}),
                     row_of_v = row_of.view(DType::kInt32, {T, k}),
                     tor_v = token_of_row.view(DType::kInt32, {R}),
                     offsets_v = offsets.view(DType::kInt32, {E + 1});

    std::deque<RankRouter> routers;  // not movable: a deque never moves its elements
    for (size_t r = 0; r < in.tokens.size(); ++r) {
      RankRouter& rr =
          routers.emplace_back(c, slice(in.x, in.first[r] * H, in.tokens[r] * H), stream);
      rr.forward(c, cublas, wr, health_v, stream);
      copy_rows(expert_idx.data() + in.first[r] * k, rr.expert_idx.data(), rr.T * k, stream);
      copy_rows(probs.data() + in.first[r] * k, rr.probs.data(), rr.T * k, stream);
    }
    dispatch_maps(idx_v, E, 1,
                  DispatchMaps{.offsets = offsets_v, .row_of = row_of_v, .token_of_row = tor_v},
                  health_v, {.data = ws.data(), .bytes = ws.size()}, stream);
    permute(x.view(DType::kBFloat16, {T, H}), row_of_v, tor_v, bf(xs, R, H), health_v, stream);
    grouped_gemm({.a = bf(xs, R, H), .b = w1_v, .offsets = offsets_v, .d = bf(h, R, F),
                  .epilogue = GemmEpilogue::kActivation, .activation = Activation::kSwiGLU,
                  .pre_activation = bf(pre, R, 2 * F)},
                 stream);
    grouped_gemm({.a = bf(h, R, F), .b = w2_v, .offsets = offsets_v, .d = bf(ys, R, H)}, stream);
    combine(bf(ys, R, H), probs_v, row_of_v, bf(y, T, H), health_v, stream);

    combine_backward(bf(dy, T, H), bf(ys, R, H), probs_v, row_of_v, tor_v, bf(dys, R, H),
                     d_probs.view(DType::kFloat32, {T, k}), health_v, stream);
    grouped_gemm_fc2_dgrad({.dys = bf(dys, R, H), .w2 = w2_v, .offsets = offsets_v,
                            .pre = bf(pre, R, 2 * F), .d_pre = bf(d_pre, R, 2 * F),
                            .activation = Activation::kSwiGLU, .scaled_act = bf(act, R, F)},
                           Fc2DgradScratch{}, stream);
    grouped_gemm_dgrad({.a = bf(d_pre, R, 2 * F), .b = w1_v, .offsets = offsets_v,
                        .d = bf(dxs, R, H)},
                       stream);
    grouped_gemm_wgrad({.a = bf(dys, R, H), .b = bf(act, R, F), .offsets = offsets_v,
                        .d = d_w2.view(DType::kFloat32, {E, H, F})},
                       stream);
    grouped_gemm_wgrad({.a = bf(d_pre, R, 2 * F), .b = bf(xs, R, H), .offsets = offsets_v,
                        .d = d_w1.view(DType::kFloat32, {E, 2 * F, H})},
                       stream);
    for (size_t r = 0; r < in.tokens.size(); ++r) {
      RankRouter& rr = routers[r];
      copy_rows(rr.d_probs.data(), d_probs.data() + in.first[r] * k, rr.T * k, stream);
      rr.backward(c, cublas, wr, stream);
      copy_rows(d_logits.data() + in.first[r] * E, rr.d_logits.data(), rr.T * E, stream);
    }
    permute_backward_router(bf(dxs, R, H), row_of_v, TensorView{},
                            d_logits.view(DType::kFloat32, {T, E}), wr, bf(dx, T, H), health_v,
                            stream);
    out = Result{.y = y.download(), .dx = dx.download(), .d_w1 = d_w1.download(),
                 .d_w2 = d_w2.download(), .health = read_health_flags(health_v, stream)};
    for (const RankRouter& rr : routers) {
      for (float v : rr.losses.download()) out.losses.push_back(v);
      for (float v : rr.d_w_router.download()) out.d_w_router.push_back(v);
    }
  }
  cublasDestroy(cublas);
  MOEFUSE_CUDA_CHECK(cudaStreamDestroy(stream));
  return out;
}

// Rank `rank`'s EpMoeLayer on its device: its tokens, its El experts' weights. Every buffer is
// allocated and uploaded (uploads synchronise) before the first collective call, and nothing
// waits on the host between the forward and the end of the backward, so every rank launches
// every transfer kernel before any rank waits.
Result ep_layer(const MoeConfig& c, EpLayerOptions options, const Inputs& in, ncclComm_t comm,
                int rank, int ranks, std::atomic<const char*>& stage) {
  const int64_t E = c.num_experts, el = E / ranks, H = c.hidden, F = c.ffn,
                T = in.tokens[rank];
  MOEFUSE_CUDA_CHECK(cudaSetDevice(rank));
  cudaStream_t stream = nullptr;
  MOEFUSE_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  Result out;
  {
    stage = "construct";
    options.max_tokens_per_rank = in.max_tokens;
    EpMoeLayer layer(c, comm, options);
    EXPECT_EQ(layer.first_expert(), rank * el);
    EXPECT_EQ(layer.local_experts(), el);

    stage = "upload";
    const DeviceBuffer<Bf16> x(slice(in.x, in.first[rank] * H, T * H), stream),
        dy(slice(in.dy, in.first[rank] * H, T * H), stream), w_router(in.w_router, stream),
        w1(slice(in.w1, rank * el * 2 * F * H, el * 2 * F * H), stream),
        w2(slice(in.w2, rank * el * H * F, el * H * F), stream);
    DeviceBuffer<Bf16> y(T * H, stream), dx(T * H, stream);
    DeviceBuffer<float> losses(2, stream), d_w_router(E * H, stream),
        d_w1(el * 2 * F * H, stream), d_w2(el * H * F, stream);
    DeviceBuffer<int32_t> health(1, stream);
    DeviceBuffer<unsigned char> cache(layer.cache_size(), stream),
        ws(layer.workspace_size(), stream);
    for (auto* b : {&y, &dx}) b->poison();
    for (auto* b : {&losses, &d_w_router, &d_w1, &d_w2}) b->poison();
    cache.poison();
    ws.poison();
    const TensorView health_v = health.view(DType::kInt32, {1});
    reset_health_flags(health_v, stream);
    reset_health_flags(layer.transport_flags(), stream);
    MOEFUSE_CUDA_CHECK(cudaStreamSynchronize(stream));

    const MoeLayerWeights w{.w_router = w_router.view(DType::kBFloat16, {E, H}),
                            .w1 = w1.view(DType::kBFloat16, {el, 2 * F, H}),
                            .w2 = w2.view(DType::kBFloat16, {el, H, F})};
    const Workspace cache_ws{.data = cache.data(), .bytes = cache.size()},
        work{.data = ws.data(), .bytes = ws.size()};
    stage = "forward";
    layer.forward(x.view(DType::kBFloat16, {T, H}), w,
                  {.y = y.view(DType::kBFloat16, {T, H}),
                   .losses = losses.view(DType::kFloat32, {2})},
                  cache_ws, work, stream, {.health = health_v});
    stage = "backward";
    layer.backward(x.view(DType::kBFloat16, {T, H}), dy.view(DType::kBFloat16, {T, H}), w,
                   {.dx = dx.view(DType::kBFloat16, {T, H}),
                    .d_w_router = d_w_router.view(DType::kFloat32, {E, H}),
                    .d_w1 = d_w1.view(DType::kFloat32, {el, 2 * F, H}),
                    .d_w2 = d_w2.view(DType::kFloat32, {el, H, F})},
                   cache_ws, work, stream, {.health = health_v});
    stage = "wait for the kernels";
    MOEFUSE_CUDA_CHECK(cudaStreamSynchronize(stream));

    stage = "download";
    out = Result{.y = y.download(), .dx = dx.download(), .losses = losses.download(),
                 .d_w_router = d_w_router.download(), .d_w1 = d_w1.download(),
                 .d_w2 = d_w2.download(), .health = read_health_flags(health_v, stream),
                 .ep_flags = read_health_flags(layer.transport_flags(), stream)};
    stage = "destroy";
  }
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

// The layer on every rank count (test::rank_counts), each with fresh inputs. Each rank's y and dx
// are its tokens' rows of one GPU's, its losses and d_w_router its tokens' router's, each owner's
// dW1 and dW2 its experts' slices.
void expect_matches_one_gpu(int gpus, const Shape& s, const EpLayerOptions& options = {},
                            bool fp8_exact = false) {
  const int64_t el = s.experts_per_rank, H = s.hidden, F = s.ffn;
  for (int ranks : test::rank_counts(gpus)) {
    SCOPED_TRACE("ranks " + std::to_string(ranks));
    const MoeConfig c = config_for(s, ranks);
    const int64_t E = c.num_experts;
    const Inputs in = make_inputs(c, ranks, fp8_exact);
    const Result want = one_gpu_layer(c, in);
    ASSERT_EQ(want.health, 0);
    // Poison is NaN: a finite one-GPU result shows every element was written.
    ASSERT_TRUE(finite(want.y) && finite(want.dx) && finite(want.losses) &&
                finite(want.d_w_router) && finite(want.d_w1) && finite(want.d_w2))
        << "the one-GPU layer left a NaN or an infinity";

    std::vector<Result> got(ranks);
    std::vector<ncclComm_t> comms = test::make_comms(ranks);
    test::run_ranks(ranks, [&](int rank, std::atomic<const char*>& stage) {
      got[rank] = ep_layer(c, options, in, comms[rank], rank, ranks, stage);
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
      expect_same_bits(r.losses, want.losses, rank * 2, 1, 2, "losses");
      expect_same_bits(r.dx, want.dx, first * H, t, H, "dx");
      expect_same_bits(r.d_w_router, want.d_w_router, rank * E * H, E, H, "d_w_router");
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

// Forward and backward pipelined in chunks of local experts (uneven: 2, 3, 3 of 8; then one
// expert a chunk), transfers on a few SMs beside GEMMs on the rest: the same bits.
TEST(EpLayerGpu, ChunkedMatchesOneGpuBitwise) {
  MOEFUSE_REQUIRE_HOPPER_GPUS(gpus);
  expect_matches_one_gpu(gpus, {.experts_per_rank = 8, .hidden = 256, .ffn = 128, .top_k = 2},
                         {.chunks = 3, .transfer_sms = 10});
  expect_matches_one_gpu(gpus, {.experts_per_rank = 4, .hidden = 512, .ffn = 256, .top_k = 4},
                         {.chunks = 4, .transfer_sms = 24});
}

// FP8 dispatch on rows it carries losslessly: the owner decodes exactly x's rows, so the layer is
// the bf16 one bit for bit, which checks the records' encode, transfer and decode whole (also in
// chunks, each part decoded before its FC1).
TEST(EpLayerGpu, Fp8DispatchOnFp8ExactRowsMatchesOneGpuBitwise) {
  MOEFUSE_REQUIRE_HOPPER_GPUS(gpus);
  expect_matches_one_gpu(gpus, {.experts_per_rank = 8, .hidden = 256, .ffn = 128, .top_k = 2},
                         {.fp8_dispatch = true}, /*fp8_exact=*/true);
  expect_matches_one_gpu(gpus, {.experts_per_rank = 4, .hidden = 512, .ffn = 256, .top_k = 4},
                         {.chunks = 4, .transfer_sms = 24, .fp8_dispatch = true},
                         /*fp8_exact=*/true);
}

float norm_error(const std::vector<Bf16>& got, const std::vector<Bf16>& want, int64_t first) {
  const std::vector<float> g = test::from_bf16(got), w = test::from_bf16(want);
  return float(test::rel_norm_error(g, std::span<const float>(w).subspan(first, g.size())));
}
float norm_error(const std::vector<float>& got, const std::vector<float>& want, int64_t first) {
  return float(test::rel_norm_error(got, std::span<const float>(want).subspan(first, got.size())));
}

// FP8 dispatch on random rows: the experts see x quantised blockwise (E4M3's relative step is
// 2^-3, so about 3% RMS error an element), so y, dx and dW1 move from the bf16 layer's by a few
// percent, and by more than bf16 rounding (the records are really FP8); what the router and the
// combine compute from x itself (losses, d_w_router's own part) is not what this checks.
TEST(EpLayerGpu, Fp8DispatchIsNearTheBf16Layer) {
  MOEFUSE_REQUIRE_HOPPER_GPUS(gpus);
  const Shape s{.experts_per_rank = 8, .hidden = 256, .ffn = 128, .top_k = 2};
  const int ranks = 2;
  const MoeConfig c = config_for(s, ranks);
  const int64_t el = s.experts_per_rank, H = s.hidden, F = s.ffn;
  const Inputs in = make_inputs(c, ranks);
  const Result want = one_gpu_layer(c, in);
  std::vector<Result> got(ranks);
  std::vector<ncclComm_t> comms = test::make_comms(ranks);
  test::run_ranks(ranks, [&](int rank, std::atomic<const char*>& stage) {
    got[rank] = ep_layer(c, {.fp8_dispatch = true}, in, comms[rank], rank, ranks, stage);
    ncclCommDestroy(comms[rank]);
  });
  for (int rank = 0; rank < ranks; ++rank) {
    SCOPED_TRACE("rank " + std::to_string(rank));
    const Result& r = got[rank];
    EXPECT_EQ(r.health, 0);
    EXPECT_EQ(r.ep_flags, 0);
    for (const auto& [what, error] :
         {std::pair{"y", norm_error(r.y, want.y, in.first[rank] * H)},
          std::pair{"dx", norm_error(r.dx, want.dx, in.first[rank] * H)},
          std::pair{"dW1", norm_error(r.d_w1, want.d_w1, rank * el * 2 * F * H)},
          std::pair{"dW2", norm_error(r.d_w2, want.d_w2, rank * el * H * F)}}) {
      EXPECT_LT(error, 0.1f) << what;
      if (std::string_view(what) != "dx" || in.tokens[rank] > 1)
        EXPECT_GT(error, 1e-3f) << what << ": no FP8 error at all";
    }
  }
}

// Checked before any NCCL or CUDA call, so these run without a GPU.
TEST(EpLayerArgs, ConfigCommAndOptionsAreNamed) {
  const MoeConfig c{.hidden = 256, .ffn = 128, .num_experts = 8, .top_k = 2};
  const EpLayerOptions options{.max_tokens_per_rank = 64};
  MoeConfig bad = c;
  bad.precision = PrecisionRecipe::kFP8Blockwise;
  test::expect_invalid([&] { EpMoeLayer l(bad, nullptr, options); }, "config.precision");
  bad = c;
  bad.hidden = 260;  // rows of 16-byte vectors
  test::expect_invalid([&] { EpMoeLayer l(bad, nullptr, options); }, "config.hidden");
  test::expect_invalid([&] { EpMoeLayer l(c, nullptr, options); }, "comm");
  // The options are checked before the communicator is used: this one is never dereferenced.
  const auto unused = reinterpret_cast<ncclComm_t>(uintptr_t{1});
  test::expect_invalid([&] { EpMoeLayer l(c, unused, {.max_tokens_per_rank = 0}); },
                       "options.max_tokens_per_rank");
  test::expect_invalid(
      [&] { EpMoeLayer l(c, unused, {.max_tokens_per_rank = 64, .receive_capacity_rows = -1}); },
      "options.receive_capacity_rows");
  bad = c;
  bad.hidden = 264;  // 16-byte bf16 rows, but not 16-byte E4M3 code rows
  test::expect_invalid(
      [&] { EpMoeLayer l(bad, unused, {.max_tokens_per_rank = 64, .fp8_dispatch = true}); },
      "options.fp8_dispatch");
}

// On two GPUs: E not a multiple of the ranks, chunks and transfer SMs out of range, then calls
// that do not fit the rank (a memory plan or x of more tokens than max_tokens_per_rank, all E
// experts' weights instead of the rank's, a short cache), each checked before anything is
// launched, so no rank waits on the other.
TEST(EpLayerArgs, RankShapesAreNamed) {
  MOEFUSE_REQUIRE_HOPPER_GPUS(gpus);
  const int ranks = 2;
  const MoeConfig c{.hidden = 256, .ffn = 128, .num_experts = 4, .top_k = 2};
  const int64_t T = 16, E = c.num_experts, el = E / ranks, H = c.hidden, F = c.ffn;
  std::vector<ncclComm_t> comms = test::make_comms(ranks);
  test::run_ranks(ranks, [&](int rank, std::atomic<const char*>& stage) {
    MOEFUSE_CUDA_CHECK(cudaSetDevice(rank));
    MoeConfig odd = c;
    odd.num_experts = 3;
    odd.top_k = 1;
    test::expect_invalid([&] { EpMoeLayer l(odd, comms[rank], {.max_tokens_per_rank = T}); },
                         "config.num_experts");
    test::expect_invalid(  // 2 experts a rank
        [&] { EpMoeLayer l(c, comms[rank], {.max_tokens_per_rank = T, .chunks = 3}); },
        "options.chunks");
    test::expect_invalid(
        [&] {
          EpMoeLayer l(c, comms[rank], {.max_tokens_per_rank = T, .chunks = 2, .transfer_sms = 0});
        },
        "options.transfer_sms");
    stage = "construct";
    EpMoeLayer layer(c, comms[rank], {.max_tokens_per_rank = T});
    const DeviceBuffer<Bf16> x((T + 1) * H), w_router(E * H), w1(E * 2 * F * H), w2(E * H * F),
        y((T + 1) * H);
    const DeviceBuffer<float> losses(2);
    DeviceBuffer<unsigned char> cache(layer.cache_size()), work(layer.workspace_size());
    const MoeLayerWeights w{.w_router = w_router.view(DType::kBFloat16, {E, H}),
                            .w1 = w1.view(DType::kBFloat16, {el, 2 * F, H}),
                            .w2 = w2.view(DType::kBFloat16, {el, H, F})};
    const Workspace cache_ws{.data = cache.data(), .bytes = cache.size()},
        work_ws{.data = work.data(), .bytes = work.size()};
    auto forward = [&](int64_t tokens, const MoeLayerWeights& weights, const Workspace& cw) {
      layer.forward(x.view(DType::kBFloat16, {tokens, H}), weights,
                    {.y = y.view(DType::kBFloat16, {tokens, H}),
                     .losses = losses.view(DType::kFloat32, {2})},
                    cw, work_ws, nullptr);
    };
    stage = "bad calls";
    test::expect_invalid([&] { layer.memory_plan(0); }, "tokens");
    test::expect_invalid([&] { layer.memory_plan(T + 1); }, "tokens");
    test::expect_invalid([&] { forward(T + 1, w, cache_ws); }, "x");
    MoeLayerWeights all = w;
    all.w1 = w1.view(DType::kBFloat16, {E, 2 * F, H});
    test::expect_invalid([&] { forward(T, all, cache_ws); }, "weights.w1");
    test::expect_invalid([&] { forward(T, w, {.data = cache.data(), .bytes = 256}); }, "cache");
    stage = "destroy";
  });
  for (ncclComm_t comm : comms) ncclCommDestroy(comm);
}

}  // namespace
}  // namespace moefuse
