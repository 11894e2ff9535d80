// EpComm (dist/nccl/ep_comm.h) on the GPUs of this machine, one thread per rank (ep_harness.h).
// The received rows, receive offsets and returned rows are compared bit for bit with
// dist/ep_layout.h on the host; outputs are poisoned first, so an unwritten row fails.
#include <cuda_runtime.h>
#include <gtest/gtest.h>
#include <nccl.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "common/test_util.h"
#include "cuda/check.h"
#include "dist/ep_layout.h"
#include "dist/nccl/ep_comm.h"
#include "formats/fp8_row_record.h"
#include "gpu_ep/ep_harness.h"
#include "moefuse/health.h"

namespace moefuse::dist {
namespace {

constexpr uint16_t kPoison = 0xFFFF;  // a NaN bf16: the random rows never hold it

enum class Role { kRandom, kEmpty, kOneExpert, kAllToExpert0 };

// One rank's input: offsets [E + 1] and xs [send_bound, H] as bf16 bits. kRandom spreads a random
// number of rows over all experts but one, which stays empty.
struct RankInput {
  std::vector<int32_t> offsets;
  std::vector<uint16_t> xs;
};

RankInput make_input(Role role, int experts, int64_t send_bound, int hidden) {
  auto& gen = test::rng();
  std::vector<int64_t> counts(experts, 0);
  const auto rows = std::uniform_int_distribution<int64_t>(1, send_bound)(gen);
  const int pick = std::uniform_int_distribution<int>(0, experts - 1)(gen);
  switch (role) {
    case Role::kEmpty: break;
    case Role::kOneExpert: counts[pick] = rows; break;
    case Role::kAllToExpert0: counts[0] = send_bound; break;
    case Role::kRandom:
      for (int64_t i = 0; i < rows; ++i) {
        const int e = std::uniform_int_distribution<int>(0, experts - 2)(gen);
        ++counts[e >= pick ? e + 1 : e];
      }
      break;
  }
  RankInput in;
  in.offsets.assign(experts + 1, 0);
  for (int e = 0; e < experts; ++e) in.offsets[e + 1] = in.offsets[e] + int32_t(counts[e]);
  in.xs.resize(size_t(send_bound) * hidden);
  std::uniform_int_distribution<int> bits(0, 0xFFFE);
  for (auto& v : in.xs) v = uint16_t(bits(gen));
  return in;
}

struct RankOutput {
  std::vector<uint16_t> received, returned;
  std::vector<int32_t> receive_offsets;
  int32_t flags = 0;
};

struct Shape {
  int experts, hidden;
  int64_t send_bound, capacity;
};

// Checks every rank's outputs of one step against ep_layout.h.
void check_step(const Shape& c, const std::vector<RankInput>& in,
                const std::vector<RankOutput>& out) {
  const int ranks = int(in.size()), el = c.experts / ranks;
  std::vector<int32_t> all;
  for (const auto& r : in) all.insert(all.end(), r.offsets.begin(), r.offsets.end());
  const GatheredOffsets g{all.data(), ranks, c.experts};
  const size_t h = size_t(c.hidden);
  std::vector<std::vector<int64_t>> starts(ranks, std::vector<int64_t>(c.experts + 1));
  bool overflow = false;
  for (int d = 0; d < ranks; ++d) {
    receive_segment_starts(g, d, starts[d].data());
    overflow |= starts[d][c.experts] > c.capacity;
  }
  for (int d = 0; d < ranks; ++d) {
    SCOPED_TRACE("rank " + std::to_string(d));
    EXPECT_EQ(out[d].flags, overflow ? kEpRowsOverflow : 0);
    std::vector<int32_t> want_offsets(el + 1);
    receive_expert_offsets(g, d, want_offsets.data());
    for (auto& o : want_offsets) o = int32_t(std::min<int64_t>(o, c.capacity));
    EXPECT_EQ(out[d].receive_offsets, want_offsets);

    // Received: the segments in (l, s) order, rows past capacity dropped, the rest untouched.
    std::vector<uint16_t> want(size_t(c.capacity) * h, kPoison);
    for (int l = 0; l < el; ++l)
      for (int s = 0; s < ranks; ++s)
        for (int64_t i = 0; i < g.count(s, d * el + l); ++i) {
          const int64_t dst = starts[d][l * ranks + s] + i;
          if (dst >= c.capacity) continue;
          const int64_t src = g.first_row(s, d * el + l) + i;
          std::copy_n(in[s].xs.begin() + src * h, h, want.begin() + dst * h);
        }
    for (int64_t row = 0; row < c.capacity; ++row)
      if (!std::equal(want.begin() + row * h, want.begin() + (row + 1) * h,
                      out[d].received.begin() + row * h)) {
        ADD_FAILURE() << "received row " << row << " differs (first of possibly more)";
        break;
      }
  }
  // Returned (received() sent back): each source's own rows where they were received.
  for (int s = 0; s < ranks; ++s) {
    SCOPED_TRACE("source rank " + std::to_string(s));
    std::vector<uint16_t> want(size_t(c.send_bound) * h, kPoison);
    for (int e = 0; e < c.experts; ++e)
      for (int64_t i = 0; i < g.count(s, e); ++i) {
        const int64_t dst = starts[e / el][(e % el) * ranks + s] + i;
        const int64_t src = g.first_row(s, e) + i;
        if (dst < c.capacity) std::copy_n(in[s].xs.begin() + src * h, h, want.begin() + src * h);
      }
    for (int64_t row = 0; row < c.send_bound; ++row)
      if (!std::equal(want.begin() + row * h, want.begin() + (row + 1) * h,
                      out[s].returned.begin() + row * h)) {
        ADD_FAILURE() << "returned row " << row << " differs (first of possibly more)";
        break;
      }
  }
}

template <class T>
std::vector<T> to_host(const TensorView& t) {
  std::vector<T> v(size_t(t.numel()));
  MOEFUSE_CUDA_CHECK(cudaMemcpy(v.data(), t.data, v.size() * sizeof(T), cudaMemcpyDeviceToHost));
  return v;
}

// How a step moves its rows: in `chunks` calls of each kind (local experts split as evenly as
// they go), by transfer kernels of `sms` CTAs (0: EpComm's default).
struct Transfer {
  int chunks = 1;
  int sms = 0;
};

// Runs steps (dispatch, then return_rows of received()) on `ranks` GPUs, eagerly or as one CUDA
// graph per rank captured once and replayed on each step's new inputs, and checks every step.
void run_steps(int ranks, const Shape& c, const std::vector<std::vector<Role>>& steps,
               bool graph, Transfer transfer = {}) {
  std::vector<std::vector<RankInput>> inputs;
  for (const auto& roles : steps) {
    inputs.emplace_back();
    for (int r = 0; r < ranks; ++r)
      inputs.back().push_back(make_input(roles[r], c.experts, c.send_bound, c.hidden));
  }
  std::vector<std::vector<RankOutput>> outputs(steps.size(), std::vector<RankOutput>(ranks));
  std::vector<ncclComm_t> comms = test::make_comms(ranks);

  test::run_ranks(ranks, [&](int rank, std::atomic<const char*>& stage) {
    MOEFUSE_CUDA_CHECK(cudaSetDevice(rank));
    cudaStream_t stream = nullptr;
    MOEFUSE_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    void *xs = nullptr, *offsets = nullptr;
    MOEFUSE_CUDA_CHECK(cudaMalloc(&xs, size_t(c.send_bound) * c.hidden * 2));
    MOEFUSE_CUDA_CHECK(cudaMalloc(&offsets, size_t(c.experts + 1) * 4));
    const TensorView xs_view =
        TensorView::contiguous(xs, DType::kBFloat16, {c.send_bound, c.hidden}, Device::kCuda);
    const TensorView offsets_view =
        TensorView::contiguous(offsets, DType::kInt32, {c.experts + 1}, Device::kCuda);
    {
      stage = "construct";
      // Rows, not tokens, are this test's unit: a plan of send_bound one-row tokens.
      EpComm ep(comms[rank],
                make_ep_plan({.experts = c.experts, .ranks = ranks, .rank = rank,
                              .max_tokens_per_rank = c.send_bound, .top_k = 1,
                              .receive_capacity_rows = c.capacity}),
                c.hidden);
      const int el = c.experts / ranks, n = transfer.chunks;
      auto chunk = [&](int g) {
        return TransferPart{
            .first_expert = g * el / n, .end_expert = (g + 1) * el / n, .ctas = transfer.sms};
      };
      auto step = [&](cudaStream_t s) {
        if (n == 1) {
          ep.dispatch(xs_view, offsets_view, s);
          ep.return_rows(ep.received(), s);
          return;
        }
        for (int g = 0; g < n; ++g) ep.dispatch(xs_view, offsets_view, s, chunk(g));
        for (int g = n - 1; g >= 0; --g) ep.return_rows(ep.received(), s, chunk(g));
      };
      cudaGraphExec_t exec = nullptr;
      if (graph) {
        stage = "capture";
        cudaGraph_t g = nullptr;
        MOEFUSE_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
        step(stream);
        MOEFUSE_CUDA_CHECK(cudaStreamEndCapture(stream, &g));
        MOEFUSE_CUDA_CHECK(cudaGraphInstantiate(&exec, g, 0));
        MOEFUSE_CUDA_CHECK(cudaGraphDestroy(g));
      }
      for (size_t k = 0; k < steps.size(); ++k) {
        stage = "upload and poison";
        const RankInput& in = inputs[k][rank];
        MOEFUSE_CUDA_CHECK(cudaMemcpyAsync(xs, in.xs.data(), in.xs.size() * 2,
                                           cudaMemcpyHostToDevice, stream));
        MOEFUSE_CUDA_CHECK(cudaMemcpyAsync(offsets, in.offsets.data(), in.offsets.size() * 4,
                                           cudaMemcpyHostToDevice, stream));
        for (const TensorView& t : {ep.received(), ep.receive_offsets(), ep.returned()})
          MOEFUSE_CUDA_CHECK(cudaMemsetAsync(t.data, 0xFF, size_t(byte_span(t)), stream));
        reset_health_flags(ep.flags(), stream);
        stage = graph ? "graph step" : "eager step";
        if (graph) MOEFUSE_CUDA_CHECK(cudaGraphLaunch(exec, stream));
        else step(stream);
        MOEFUSE_CUDA_CHECK(cudaStreamSynchronize(stream));
        stage = "download";
        RankOutput& out = outputs[k][rank];
        out.received = to_host<uint16_t>(ep.received());
        out.receive_offsets = to_host<int32_t>(ep.receive_offsets());
        out.returned = to_host<uint16_t>(ep.returned());
        out.flags = read_health_flags(ep.flags(), stream);
      }
      if (exec != nullptr) MOEFUSE_CUDA_CHECK(cudaGraphExecDestroy(exec));
      stage = "destroy";
    }
    MOEFUSE_CUDA_CHECK(cudaFree(xs));
    MOEFUSE_CUDA_CHECK(cudaFree(offsets));
    MOEFUSE_CUDA_CHECK(cudaStreamDestroy(stream));
    ncclCommDestroy(comms[rank]);
  });

  for (size_t k = 0; k < steps.size(); ++k) {
    SCOPED_TRACE("ranks " + std::to_string(ranks) + ", step " + std::to_string(k) +
                 (graph ? " (graph)" : " (eager)"));
    check_step(c, inputs[k], outputs[k]);
  }
}

// On every rank count (rank_counts): step 0 with rank 0's rows all on one expert and rank 1
// without rows, then two fully random steps; worst-case capacity (nothing dropped).
void run_edge_then_random(int gpus, int experts_per_rank, int hidden, int64_t send_bound,
                          bool graph, Transfer transfer = {}) {
  for (int ranks : test::rank_counts(gpus)) {
    std::vector<std::vector<Role>> steps(3, std::vector<Role>(ranks, Role::kRandom));
    steps[0][0] = Role::kOneExpert;
    steps[0][1] = Role::kEmpty;
    const Shape c{.experts = experts_per_rank * ranks, .hidden = hidden,
                  .send_bound = send_bound, .capacity = ranks * send_bound};
    run_steps(ranks, c, steps, graph, transfer);
  }
}

TEST(EpComm, DispatchAndReturnBitExact) {
  MOEFUSE_REQUIRE_HOPPER_GPUS(gpus);
  run_edge_then_random(gpus, 4, 136, 300, /*graph=*/false);
}

// Captured once per rank, replayed on each step's new inputs (rows of 65 vectors: uneven lanes).
TEST(EpComm, GraphReplaysOnNewInputs) {
  MOEFUSE_REQUIRE_HOPPER_GPUS(gpus);
  run_edge_then_random(gpus, 2, 520, 257, /*graph=*/true);
}

// In chunks of local experts (uneven: 1, 1, 2 of 4), returned in the reverse order, by transfer
// kernels of 5 CTAs: the same rows as whole transfers, eager and replayed.
TEST(EpComm, ChunkedTransfersMatchWhole) {
  MOEFUSE_REQUIRE_HOPPER_GPUS(gpus);
  run_edge_then_random(gpus, 4, 136, 300, /*graph=*/false, {.chunks = 3, .sms = 5});
  run_edge_then_random(gpus, 4, 72, 100, /*graph=*/true, {.chunks = 4, .sms = 3});
}

// A receive capacity below the worst case: rank 0 sends all its rows to its own expert 0, more
// than fit. Rows past capacity are dropped, receive offsets clamped, the flag set on every rank.
TEST(EpComm, CapacityOverflowDropsRowsAndFlags) {
  MOEFUSE_REQUIRE_HOPPER_GPUS(gpus);
  const int ranks = 2;
  const Shape c{.experts = 4, .hidden = 64, .send_bound = 200, .capacity = 150};
  std::vector<std::vector<Role>> steps{{Role::kAllToExpert0, Role::kRandom},
                                       {Role::kRandom, Role::kRandom}};
  run_steps(ranks, c, steps, /*graph=*/false);
}

// Checked before any NCCL call, so these run without a GPU: a bad row width, a null comm.
TEST(EpCommArgs, HiddenAndCommAreNamed) {
  const EpPlan plan =
      make_ep_plan({.experts = 8, .ranks = 2, .rank = 0, .max_tokens_per_rank = 64, .top_k = 2});
  test::expect_invalid([&] { EpComm ep(nullptr, plan, 60); }, "hidden");  // 60 % 8 != 0
  test::expect_invalid([&] { EpComm ep(nullptr, plan, 0); }, "hidden");
  test::expect_invalid([&] { EpComm ep(nullptr, plan, 64); }, "comm");
}

// A plan of another communicator (checked before any collective call, so no rank waits on the
// others), then views of the wrong shape and bad parts for dispatch and return_rows (checked
// before launch).
TEST(EpCommArgs, PlanAndViewsMustMatch) {
  MOEFUSE_REQUIRE_HOPPER_GPUS(gpus);
  const int ranks = 2;
  const EpPlanArgs args{.experts = 4, .ranks = ranks, .max_tokens_per_rank = 32, .top_k = 2};
  std::vector<ncclComm_t> comms = test::make_comms(ranks);
  test::run_ranks(ranks, [&](int rank, std::atomic<const char*>& stage) {
    MOEFUSE_CUDA_CHECK(cudaSetDevice(rank));
    EpPlanArgs other = args;
    other.rank = 1 - rank;
    test::expect_invalid([&] { EpComm ep(comms[rank], make_ep_plan(other), 64); }, "plan.rank");
    other = args;
    other.rank = rank;
    other.ranks = 2 * ranks;
    test::expect_invalid([&] { EpComm ep(comms[rank], make_ep_plan(other), 64); }, "plan.ranks");
    other.ranks = ranks;
    stage = "construct";
    {
      const EpPlan plan = make_ep_plan(other);
      EpComm ep(comms[rank], plan, 64);
      void* buffer = nullptr;  // large enough for every view below
      MOEFUSE_CUDA_CHECK(cudaMalloc(&buffer, size_t(plan.receive_capacity_rows) * 64 * 2 + 256));
      const auto view = [&](DType dtype, std::initializer_list<int64_t> shape) {
        return TensorView::contiguous(buffer, dtype, shape, Device::kCuda);
      };
      const TensorView xs = view(DType::kBFloat16, {plan.send_rows, 64});
      const TensorView offsets = view(DType::kInt32, {plan.experts + 1});
      test::expect_invalid([&] { ep.dispatch(view(DType::kBFloat16, {plan.send_rows - 1, 64}),
                                             offsets, nullptr); }, "xs");
      test::expect_invalid([&] { ep.dispatch(view(DType::kFloat32, {plan.send_rows, 64}),
                                             offsets, nullptr); }, "xs");
      // FP8 row records (uint8): one record a row, fp8_record_bytes(H) bytes.
      const int64_t record_bytes = formats::fp8_record_bytes(64);
      test::expect_invalid([&] { ep.dispatch(view(DType::kUInt8, {plan.send_rows, 128}), offsets,
                                             nullptr); }, "xs");  // bf16-sized rows
      test::expect_invalid([&] { ep.dispatch(view(DType::kUInt8,
                                                  {plan.send_rows - 1, record_bytes}),
                                             offsets, nullptr); }, "xs");
      test::expect_invalid([&] { ep.dispatch(xs, view(DType::kInt32, {plan.experts}), nullptr); },
                           "offsets");
      test::expect_invalid([&] { ep.return_rows(xs, nullptr); }, "ys_recv");
      // Parts of a chunked transfer (2 local experts a rank): empty, past El, too many CTAs.
      const TensorView received = ep.received();
      for (const TransferPart bad : {TransferPart{.first_expert = 1, .end_expert = 1},
                                     TransferPart{.first_expert = 0, .end_expert = 3}}) {
        test::expect_invalid([&] { ep.dispatch(xs, offsets, nullptr, bad); }, "part");
        test::expect_invalid([&] { ep.return_rows(received, nullptr, bad); }, "part");
      }
      test::expect_invalid(
          [&] { ep.dispatch(xs, offsets, nullptr, {.first_expert = 0, .end_expert = 2,
                                                   .ctas = 1 << 20}); },
          "part.ctas");
      stage = "destroy";
      MOEFUSE_CUDA_CHECK(cudaFree(buffer));
    }
    ncclCommDestroy(comms[rank]);
  });
}

}  // namespace
}  // namespace moefuse::dist
