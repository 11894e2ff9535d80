// moefuse-ep-bench: EpComm's transfers (dist/nccl/ep_comm.h) on the GPUs of this machine, one
// process with one thread per rank, against NCCL's own all-to-all measured in the same run.
//
// Each rank routes --tokens T tokens of the preset (T·k rows, uniform over the E experts:
// workload.h) and times on its stream, with CUDA events, --iters launches after --warmup of:
//   dispatch     its rows to the experts' owners (send bound T·k, worst-case capacity R·T·k);
//   return_rows  the received rows back to their sources;
//   all_to_all   grouped ncclSend/ncclRecv of its dispatch bytes spread evenly over the peers,
//                on cudaMalloc buffers: the library baseline.
// Each op starts on all ranks together (a host barrier); a rank launches all its iterations back
// to back and synchronises only after them, so every rank has launched an iteration before any
// waits for it. Bytes are those leaving a rank (rows for its own experts stay), bf16 [H] a row.
// Reported: ms, the max over ranks of each rank's median; MB, the mean over ranks; GB/s, the min
// over ranks of a rank's bytes over its median; vs_nccl, GB/s over the all-to-all's.
#include <cuda_runtime.h>
#include <nccl.h>

#include <algorithm>
#include <atomic>
#include <barrier>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <functional>
#include <numeric>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "bench/device_buffer.h"
#include "bench/mode.h"
#include "bench/report.h"
#include "bench/timing.h"
#include "cuda/check.h"
#include "cuda/device.h"
#include "dist/nccl/ep_comm.h"
#include "dist/nccl/nccl_check.h"
#include "ep_bench/workload.h"
#include "moefuse/config.h"
#include "moefuse/health.h"

namespace moefuse::ep_bench {
namespace {

using bench::DeviceBuffer;

// A rank that finishes no step for this long is taken to hang: its kernels cannot be cancelled.
constexpr auto kStallLimit = std::chrono::seconds(60);
constexpr int kOps = 3;
constexpr const char* kOpNames[kOps] = {"dispatch", "return_rows", "all_to_all"};
constexpr int kSteps = kOps + 2;  // construct, the ops, check

struct Options {
  std::string preset;
  int ranks = 0;
  int64_t tokens = 0;
  int warmup = 0, iters = 0;
  uint64_t seed = 0;
};

// One rank's progress, read by the watching thread; `error` is written before `finished`.
struct RankState {
  std::atomic<const char*> stage{"start"};
  std::atomic<int> steps{0};
  std::atomic<bool> finished{false};
  std::string error;
  double median_ms[kOps] = {};
};

// What rank `rank`'s op `op` moves off the GPU.
int64_t bytes_out(const Workload& w, int op, int rank) {
  if (op == 0) return w.dispatch_bytes(rank);
  if (op == 1) return w.return_bytes(rank);
  return w.all_to_all_peer_bytes(rank) * (w.ranks - 1);
}

// Rank `rank`'s whole run, on the calling thread and device `rank`.
void run_rank(int rank, const Options& o, const Workload& w, ncclComm_t comm,
              std::barrier<>& together, RankState& state) {
  MOEFUSE_CUDA_CHECK(cudaSetDevice(rank));
  cudaStream_t stream = nullptr;
  MOEFUSE_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  const int R = o.ranks;
  const int64_t rows = w.offsets[rank].back(), H = w.hidden, E = w.experts;
  const DeviceBuffer xs(size_t(2 * rows * H)), offsets = bench::upload(w.offsets[rank]);
  bench::fill_uniform_bf16(xs.get(), size_t(rows * H), -1, 1, o.seed + rank, stream);

  // The all-to-all's buffers, one slot per peer in rank order (+2: never empty, whole bf16s).
  const int64_t send_each = w.all_to_all_peer_bytes(rank);
  int64_t recv_total = 0;
  for (int p = 0; p < R; ++p) recv_total += p == rank ? 0 : w.all_to_all_peer_bytes(p);
  const DeviceBuffer a2a_send(size_t(send_each * (R - 1) + 2)), a2a_recv(size_t(recv_total + 2));
  bench::fill_uniform_bf16(a2a_send.get(), a2a_send.bytes() / 2, -1, 1, o.seed + R + rank, stream);
  const auto all_to_all = [&](cudaStream_t s) {
    auto* send = static_cast<const char*>(a2a_send.get());
    auto* recv = static_cast<char*>(a2a_recv.get());
    MOEFUSE_NCCL_CHECK(comm, ncclGroupStart());
    for (int p = 0; p < R; ++p) {
      if (p == rank) continue;
      const int64_t n = w.all_to_all_peer_bytes(p);
      MOEFUSE_NCCL_CHECK(comm, ncclSend(send, size_t(send_each), ncclUint8, p, comm, s));
      MOEFUSE_NCCL_CHECK(comm, ncclRecv(recv, size_t(n), ncclUint8, p, comm, s));
      send += send_each;
      recv += n;
    }
    MOEFUSE_NCCL_CHECK(comm, ncclGroupEnd());
  };
  {
    state.stage = "construct";
    // Every rank permutes exactly tokens·k rows: a plan of that many one-row tokens.
    dist::EpComm ep(comm,
                    dist::make_ep_plan({.experts = int(E), .ranks = R, .rank = rank,
                                        .max_tokens_per_rank = rows, .top_k = 1}),
                    int(H));
    const TensorView xs_view = xs.view(DType::kBFloat16, {rows, H});
    const TensorView offsets_view = offsets.view(DType::kInt32, {E + 1});
    const std::function<void(cudaStream_t)> ops[kOps] = {
        [&](cudaStream_t s) { ep.dispatch(xs_view, offsets_view, s); },
        [&](cudaStream_t s) { ep.return_rows(ep.received(), s); }, all_to_all};
    ++state.steps;
    for (int op = 0; op < kOps; ++op) {
      state.stage = kOpNames[op];
      together.arrive_and_wait();
      state.median_ms[op] = bench::time_on_stream(ops[op], stream, o.warmup, o.iters).median_ms;
      ++state.steps;
    }

    // A transfer that dropped or misplaced rows would be timed for bytes it never moved.
    state.stage = "check";
    const int32_t flags = read_health_flags(ep.flags(), stream);
    if (flags != 0)
      throw Error("EpComm flags() = " + std::to_string(flags) +
                  " after the run (1: rows overflowed capacity, 2: bad offsets)");
    int32_t received = 0;
    const auto* last = static_cast<const int32_t*>(ep.receive_offsets().data) + E / R;
    MOEFUSE_CUDA_CHECK(cudaMemcpy(&received, last, sizeof received, cudaMemcpyDeviceToHost));
    int64_t expected = 0;
    for (int s = 0; s < R; ++s) expected += w.rows[s][rank];
    if (received != expected)
      throw Error("EpComm received " + std::to_string(received) + " rows, expected " +
                  std::to_string(expected));
    ++state.steps;
  }
  MOEFUSE_CUDA_CHECK(cudaStreamDestroy(stream));
  ncclCommDestroy(comm);
}

[[noreturn]] void abort_run(const std::string& why) {
  bench::progress_done();
  std::fprintf(stderr, "moefuse-ep-bench: %s\n", why.c_str());
  std::fflush(stderr);
  std::_Exit(EXIT_FAILURE);
}

// Runs every rank on its own thread, with a progress line. A failed rank ends the process (the
// others may wait on it forever), and so does a run in which no rank finishes a step for
// kStallLimit, naming the ranks still running and their stage.
void run_ranks(const Options& o, const Workload& w, std::vector<RankState>& states) {
  setenv("NCCL_NVLS_ENABLE", "0", 1);  // NVLink multicast stays off (device policy)
  std::vector<ncclComm_t> comms(o.ranks);
  std::vector<int> devices(o.ranks);
  std::iota(devices.begin(), devices.end(), 0);
  const ncclResult_t status = ncclCommInitAll(comms.data(), o.ranks, devices.data());
  if (status != ncclSuccess)
    throw Error(std::string("ncclCommInitAll: ") + ncclGetErrorString(status));

  std::barrier together(o.ranks);
  std::vector<std::thread> threads;
  for (int r = 0; r < o.ranks; ++r)
    threads.emplace_back([&, r] {
      try {
        run_rank(r, o, w, comms[r], together, states[r]);
      } catch (const std::exception& e) {
        states[r].error = e.what();
      }
      states[r].finished = true;
    });

  int last_steps = -1;
  auto last_change = std::chrono::steady_clock::now();
  for (;;) {
    int done = 0, steps = 0, slowest = 0;
    for (int r = 0; r < o.ranks; ++r) {
      if (states[r].finished && !states[r].error.empty())
        abort_run("rank " + std::to_string(r) + ": " + states[r].error);
      done += states[r].finished;
      steps += states[r].steps;
      if (states[r].steps < states[slowest].steps) slowest = r;
    }
    if (done == o.ranks) break;
    const auto now = std::chrono::steady_clock::now();
    if (steps != last_steps) {
      last_steps = steps;
      last_change = now;
    } else if (now - last_change > kStallLimit) {
      std::string stuck;
      for (int r = 0; r < o.ranks; ++r)
        if (!states[r].finished)
          stuck += " rank " + std::to_string(r) + " in " + states[r].stage.load() + ";";
      abort_run("no rank finished a step for " + std::to_string(kStallLimit.count()) +
                " s (a hang?); stuck:" + stuck);
    }
    // After its last step a rank still tears down (stage "check") until it finishes.
    bench::progress("[" + std::to_string(std::min(states[slowest].steps + 1, kSteps)) + "/" +
                    std::to_string(kSteps) + "] " + states[slowest].stage.load() + " on " +
                    std::to_string(o.ranks) + " GPUs");
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  bench::progress_done();
  for (auto& t : threads) t.join();
}

// The summary table and the per-rank one; both go to --json.
void report(const Options& o, const Workload& w, const std::vector<RankState>& states,
            const std::string& reproduce, const bench::Args& args, const std::string& json) {
  bench::Report summary("ep: EpComm vs NCCL all-to-all, per rank (ms: max over ranks of the "
                        "medians, MB: mean, GB/s: the slowest rank's)",
                        {"op", "ms", "MB_out", "GB/s", "vs_nccl"});
  bench::Report per_rank("ep: each rank", {"op", "rank", "median_ms", "MB_out", "GB/s"});
  double gbs[kOps], ms[kOps], mb[kOps];
  for (int op = 0; op < kOps; ++op) {
    ms[op] = mb[op] = 0;
    gbs[op] = 1e300;
    for (int r = 0; r < o.ranks; ++r) {
      const double bytes = double(bytes_out(w, op, r)), t = states[r].median_ms[op];
      ms[op] = std::max(ms[op], t);
      mb[op] += bytes / 1e6 / o.ranks;
      gbs[op] = std::min(gbs[op], bytes / t / 1e6);
      per_rank.add_row({std::string(kOpNames[op]), static_cast<long long>(r), t, bytes / 1e6,
                        bytes / t / 1e6});
    }
  }
  for (int op = 0; op < kOps; ++op)
    summary.add_row({std::string(kOpNames[op]), ms[op], mb[op], gbs[op], gbs[op] / gbs[2]});
  const MoeConfig c = preset(o.preset);
  summary.set_meta("preset", o.preset);
  summary.set_meta("ranks", static_cast<long long>(o.ranks));
  summary.set_meta("tokens per rank", static_cast<long long>(o.tokens));
  summary.set_meta("H, E, k", std::to_string(c.hidden) + ", " + std::to_string(c.num_experts) +
                                  ", " + std::to_string(c.top_k));
  summary.set_meta("iterations", static_cast<long long>(o.iters));
  summary.set_meta("reproduce", reproduce);
  summary.print();
  per_rank.print();
  if (!json.empty()) bench::write_json_file(json, args.command(), {&summary, &per_rank});
}

int run(int argc, char** argv) {
  bench::Args args(argc, argv, 1);
  if (args.flag("help")) {
    std::printf("usage: moefuse-ep-bench [--preset qwen3-30b-a3b] [--tokens 8192] [--ranks all]\n"
                "       [--warmup 5] [--iters 30] [--seed random] [--json FILE]\n");
    return 0;
  }
  Options o;
  o.preset = args.get("preset", "qwen3-30b-a3b");
  o.tokens = args.get_int("tokens", 8192, 1, 1 << 20);
  o.warmup = int(args.get_int("warmup", 5, 0, 1000));
  o.iters = int(args.get_int("iters", 30, 1, 100000));
  const bool seeded = !args.get("seed", "").empty();
  o.seed = seeded ? uint64_t(args.get_int("seed", 0, 0, INT64_MAX)) : std::random_device{}();
  const bool all_gpus = args.get("ranks", "").empty();
  const std::string json = args.get("json", "");
  args.finish();
  const MoeConfig c = preset(o.preset);  // throws InvalidArgument naming the known presets

  std::string why;
  const int gpus = cuda::hopper_devices(2, &why);
  if (gpus == 0) {
    std::printf("moefuse-ep-bench needs at least two sm_90 (Hopper) GPUs: %s\n"
                "Nothing was measured.\n", why.c_str());
    return 0;
  }
  o.ranks = all_gpus ? gpus : int(args.get_int("ranks", gpus, 2, gpus));
  MOEFUSE_EXPECT(c.num_experts % o.ranks == 0, "--ranks",
                 "a divisor of the preset's " + std::to_string(c.num_experts) + " experts",
                 std::to_string(o.ranks));
  const std::string reproduce =
      args.command() + (seeded ? "" : " --seed " + std::to_string(o.seed));
  std::printf("moefuse-ep-bench: %s, %d GPUs, %lld tokens per rank, seed %llu\n",
              o.preset.c_str(), o.ranks,
              static_cast<long long>(o.tokens), static_cast<unsigned long long>(o.seed));
  std::fflush(stdout);

  const Workload w =
      draw_workload(o.ranks, c.num_experts, c.hidden, o.tokens * c.top_k, o.seed);
  std::vector<RankState> states(o.ranks);
  run_ranks(o, w, states);
  report(o, w, states, reproduce, args, json);
  return 0;
}

}  // namespace
}  // namespace moefuse::ep_bench

int main(int argc, char** argv) {
  try {
    return moefuse::ep_bench::run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "moefuse-ep-bench: %s\n", e.what());
    return 2;
  }
}
