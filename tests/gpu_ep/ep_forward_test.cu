// The MoE forward under expert parallelism on the GPUs of this machine (one thread per rank,
// ep_harness.h), compared bit for bit with the same forward on one GPU for all ranks' tokens
// concatenated in rank order.
//
// Each rank routes its own tokens over all E experts, permutes them, EpComm::dispatch sends the
// rows to their experts' owners, the owner runs FC1 + SwiGLU and FC2 over its El = E / R experts,
// EpComm::return_rows brings the outputs back and the rank combines its tokens. Why the result
// is bitwise that of one GPU:
// - the router is one warp per token (router_topk.cu) and combine one warp per token, summing its
//   k rows in j order: a token's probabilities and y depend on that token's data only;
// - the owner receives expert e's rows in the one-GPU order of the concatenated batch
//   (dist/ep_layout.h), so every row sits at the same index inside its expert, hence at the same
//   row of the same m-block tile, as on one GPU; the grouped GEMM computes each row of a tile
//   from that row of A and the expert's weight alone, over the same K blocks in the same order.
// The one exception is the logits GEMM: cuBLAS picks its algorithm (tiling, split-K) from the
// shape, so a token's logits may depend on the batch size T. The one-GPU forward therefore runs
// router_logits per rank's tokens (the shapes each rank runs) and everything after it on the
// concatenated batch; expert parallelism does not touch the router (it is data-parallel).
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

// All ranks' tokens concatenated in rank order and the full weights, on the host.
struct Inputs {
  std::vector<int64_t> tokens, first;  // per rank: its T_s and its first token in the batch
  int64_t total = 0, max_tokens = 0;
  std::vector<Bf16> x;         // [total, H]
  std::vector<Bf16> w_router;  // [E, H], the same on every rank
  std::vector<Bf16> w1;        // [E, 2F, H], GLU-interleaved (grouped_gemm.h)
  std::vector<Bf16> w2;        // [E, H, F]
};

// Uneven token counts, 256 to 1024 a rank (experts of several 128-row tiles), except rank 1's
// single token.
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

// A workspace for every call of the forward on T tokens (they run one after another on one
// stream, so they can share it).
size_t workspace_bytes(int64_t T, int64_t E) {
  return std::max({router_logits_workspace_size(), router_topk_workspace_size(T, E),
                   dispatch_maps_workspace_size(T, E)});
}

// Everything one forward writes on the current device: T tokens over E experts, `permuted`
// permuted rows (at least T·k), `expert_rows` rows through the experts' GEMMs; all poisoned and
// the health flag reset on `stream`.
struct ForwardBuffers {
  int64_t T, E, k, H, F, permuted, expert_rows;
  DeviceBuffer<float> logits, probs, aux_f, aux_P, losses;
  DeviceBuffer<int32_t> expert_idx, counts, offsets, row_of, token_of_row, health;
  DeviceBuffer<Bf16> xs, h, ys, y;
  DeviceBuffer<unsigned char> ws;

  ForwardBuffers(int64_t tokens, int64_t experts, const Shape& s, int64_t permuted_rows,
                 int64_t gemm_rows, cudaStream_t stream)
      : T(tokens), E(experts), k(s.top_k), H(s.hidden), F(s.ffn), permuted(permuted_rows),
        expert_rows(gemm_rows), logits(T * E, stream), probs(T * k, stream), aux_f(E, stream),
        aux_P(E, stream), losses(2, stream), expert_idx(T * k, stream), counts(E, stream),
        offsets(E + 1, stream), row_of(T * k, stream), token_of_row(permuted, stream),
        health(1, stream), xs(permuted * H, stream), h(expert_rows * F, stream),
        ys(expert_rows * H, stream), y(T * H, stream), ws(workspace_bytes(T, E), stream) {
    for (auto* b : {&logits, &probs, &aux_f, &aux_P, &losses}) b->poison();
    for (auto* b : {&expert_idx, &counts, &offsets, &row_of, &token_of_row}) b->poison(0x7F);
    for (auto* b : {&xs, &h, &ys, &y}) b->poison();
    reset_health_flags(health_view(), stream);
  }

  Workspace workspace() const { return {.data = ws.data(), .bytes = ws.size()}; }
  TensorView health_view() const { return health.view(DType::kInt32, {1}); }
  TensorView logits_view() const { return logits.view(DType::kFloat32, {T, E}); }
  TensorView probs_view() const { return probs.view(DType::kFloat32, {T, k}); }
  TensorView row_of_view() const { return row_of.view(DType::kInt32, {T, k}); }
  TensorView offsets_view() const { return offsets.view(DType::kInt32, {E + 1}); }
  TensorView xs_view() const { return xs.view(DType::kBFloat16, {permuted, H}); }
  TensorView ys_view() const { return ys.view(DType::kBFloat16, {expert_rows, H}); }
  TensorView y_view() const { return y.view(DType::kBFloat16, {T, H}); }
};

// From b.logits: router_topk, dispatch_maps (align 1) and permute of x [T, H] into b.xs.
void route_and_permute(const ForwardBuffers& b, const TensorView& x, cudaStream_t stream) {
  router_topk(RouterOptions{}, b.k, b.logits_view(), TensorView{},
              RouterOutputs{.expert_idx = b.expert_idx.view(DType::kInt32, {b.T, b.k}),
                            .probs = b.probs_view(),
                            .counts = b.counts.view(DType::kInt32, {b.E}),
                            .aux_f = b.aux_f.view(DType::kFloat32, {b.E}),
                            .aux_P = b.aux_P.view(DType::kFloat32, {b.E}),
                            .losses = b.losses.view(DType::kFloat32, {2})},
              b.health_view(), b.workspace(), stream);
  const TensorView token_of_row = b.token_of_row.view(DType::kInt32, {b.permuted});
  dispatch_maps(b.expert_idx.view(DType::kInt32, {b.T, b.k}), b.E, 1,
                DispatchMaps{.offsets = b.offsets_view(), .row_of = b.row_of_view(),
                             .token_of_row = token_of_row},
                b.health_view(), b.workspace(), stream);
  permute(x, b.row_of_view(), token_of_row, b.xs_view(), b.health_view(), stream);
}

// The experts (w1 [E', 2F, H], w2 [E', H, F]) over rows a [expert_rows, H] with offsets [E' + 1]:
// b.h = SwiGLU(a · w1ᵀ), then b.ys = b.h · w2ᵀ (unweighted: combine applies the routing weights).
void expert_mlp(const TensorView& a, const TensorView& offsets, const TensorView& w1,
                const TensorView& w2, const ForwardBuffers& b, cudaStream_t stream) {
  const TensorView h = b.h.view(DType::kBFloat16, {b.expert_rows, b.F});
  grouped_gemm({.a = a, .b = w1, .offsets = offsets, .d = h,
                .epilogue = GemmEpilogue::kActivation, .activation = Activation::kSwiGLU},
               stream);
  grouped_gemm({.a = h, .b = w2, .offsets = offsets, .d = b.ys_view()}, stream);
}

struct Result {
  std::vector<Bf16> y;
  int32_t health = -1, ep_flags = 0;
};

// The forward on device 0 for all tokens and all E experts.
Result one_gpu_forward(const Shape& s, int64_t E, const Inputs& in) {
  const int64_t T = in.total, H = s.hidden, F = s.ffn, k = s.top_k, rows = T * k;
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
    const ForwardBuffers b(T, E, s, rows, rows, stream);

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
    expert_mlp(b.xs_view(), b.offsets_view(), w1.view(DType::kBFloat16, {E, 2 * F, H}),
               w2.view(DType::kBFloat16, {E, H, F}), b, stream);
    combine(b.ys_view(), b.probs_view(), b.row_of_view(), b.y_view(), b.health_view(), stream);
    out.health = read_health_flags(b.health_view(), stream);
    out.y = b.y.download();
  }
  cublasDestroy(cublas);
  MOEFUSE_CUDA_CHECK(cudaStreamDestroy(stream));
  return out;
}

// Rank `rank`'s forward on its device: its tokens, its El experts' weights, EpComm in between.
// Every buffer is allocated and uploaded (uploads synchronise) before the first EpComm call, and
// nothing waits on the host between dispatch and the end, so every rank launches every
// collective kernel before any rank waits.
Result ep_forward(const Shape& s, const Inputs& in, ncclComm_t comm, int rank, int ranks,
                  std::atomic<const char*>& stage) {
  const int64_t E = s.experts_per_rank * ranks, el = s.experts_per_rank, H = s.hidden,
                F = s.ffn, k = s.top_k, T = in.tokens[rank];
  const int64_t send_bound = in.max_tokens * k, capacity = ranks * send_bound;
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
    const ForwardBuffers b(T, E, s, send_bound, capacity, stream);

    stage = "construct";
    dist::EpComm ep(comm, {.experts = static_cast<int>(E), .hidden = static_cast<int>(H),
                           .send_bound = send_bound, .capacity = capacity});
    for (const TensorView& t : {ep.received(), ep.receive_offsets(), ep.returned()})
      MOEFUSE_CUDA_CHECK(cudaMemsetAsync(t.data, 0xFF, size_t(byte_span(t)), stream));
    reset_health_flags(ep.flags(), stream);

    stage = "forward";
    router_logits(cublas, x.view(DType::kBFloat16, {T, H}),
                  w_router.view(DType::kBFloat16, {E, H}), b.logits_view(), b.workspace(), stream);
    route_and_permute(b, x.view(DType::kBFloat16, {T, H}), stream);
    ep.dispatch(b.xs_view(), b.offsets_view(), stream);
    expert_mlp(ep.received(), ep.receive_offsets(), w1.view(DType::kBFloat16, {el, 2 * F, H}),
               w2.view(DType::kBFloat16, {el, H, F}), b, stream);
    ep.return_rows(b.ys_view(), stream);
    combine(ep.returned(), b.probs_view(), b.row_of_view(), b.y_view(), b.health_view(), stream);
    MOEFUSE_CUDA_CHECK(cudaStreamSynchronize(stream));

    stage = "download";
    out.health = read_health_flags(b.health_view(), stream);
    out.ep_flags = read_health_flags(ep.flags(), stream);
    out.y = b.y.download();
    stage = "destroy";
  }
  cublasDestroy(cublas);
  MOEFUSE_CUDA_CHECK(cudaStreamDestroy(stream));
  return out;
}

bool finite(const std::vector<Bf16>& v) {
  return std::all_of(v.begin(), v.end(),
                     [](Bf16 b) { return std::isfinite(__bfloat162float(b)); });
}

// Rank s's y against its rows of the one-GPU y, bit for bit; names the first differing element.
void expect_same_rows(const Result& got, const Result& want, const Inputs& in, int rank,
                      int64_t H) {
  const int64_t T = in.tokens[rank], first = in.first[rank];
  ASSERT_EQ(got.y.size(), size_t(T * H));
  const Bf16* w = want.y.data() + first * H;
  if (std::memcmp(got.y.data(), w, got.y.size() * sizeof(Bf16)) == 0) return;
  for (int64_t i = 0; i < T * H; ++i)
    if (std::memcmp(&got.y[i], &w[i], sizeof(Bf16)) != 0) {
      ADD_FAILURE() << "y differs first at token " << i / H << " (batch token " << first + i / H
                    << "), column " << i % H << ": " << __bfloat162float(got.y[i])
                    << " vs one GPU's " << __bfloat162float(w[i]);
      return;
    }
}

// The forward on every rank count (test::rank_counts), each with fresh inputs.
void expect_matches_one_gpu(int gpus, const Shape& s) {
  SCOPED_TRACE("seed " + std::to_string(test::seed()));
  for (int ranks : test::rank_counts(gpus)) {
    SCOPED_TRACE("ranks " + std::to_string(ranks));
    const Inputs in = make_inputs(s, ranks);
    const Result want = one_gpu_forward(s, s.experts_per_rank * ranks, in);
    ASSERT_EQ(want.health, 0);
    ASSERT_TRUE(finite(want.y)) << "the one-GPU y holds a NaN or an infinity";

    std::vector<Result> got(ranks);
    std::vector<ncclComm_t> comms = test::make_comms(ranks);
    test::run_ranks(ranks, [&](int rank, std::atomic<const char*>& stage) {
      got[rank] = ep_forward(s, in, comms[rank], rank, ranks, stage);
      ncclCommDestroy(comms[rank]);
    });
    for (int rank = 0; rank < ranks; ++rank) {
      SCOPED_TRACE("rank " + std::to_string(rank) + " of " + std::to_string(in.tokens[rank]) +
                   " tokens");
      EXPECT_EQ(got[rank].health, 0);
      EXPECT_EQ(got[rank].ep_flags, 0);
      expect_same_rows(got[rank], want, in, rank, s.hidden);
    }
  }
}

// 8 experts a rank, top-2: FC1 and FC2 one n-block each.
TEST(EpForward, Top2MatchesOneGpuBitwise) {
  MOEFUSE_REQUIRE_HOPPER_GPUS(gpus);
  expect_matches_one_gpu(gpus, {.experts_per_rank = 8, .hidden = 256, .ffn = 128, .top_k = 2});
}

// 4 experts a rank, top-4, wider: two n-blocks in FC1 (2F = 512) and in FC2 (H = 512).
TEST(EpForward, Top4MatchesOneGpuBitwise) {
  MOEFUSE_REQUIRE_HOPPER_GPUS(gpus);
  expect_matches_one_gpu(gpus, {.experts_per_rank = 4, .hidden = 512, .ffn = 256, .top_k = 4});
}

}  // namespace
}  // namespace moefuse
