// moefuse-ep-bench: EpComm's transfers (dist/nccl/ep_comm.h) on the GPUs of this machine, one
// process with one thread per rank, against NCCL's own all-to-all measured in the same run.
//
// Each rank routes --tokens T tokens of the preset (T·k rows, uniform over the E experts:
// workload.h) and times on its stream, with CUDA events, --iters launches after --warmup of:
//   dispatch     its rows to the experts' owners (send bound T·k, worst-case capacity R·T·k);
//   return_rows  the received rows back to their sources;
//   all_to_all   grouped ncclSend/ncclRecv of its dispatch bytes spread evenly over the peers,
//                on cudaMalloc buffers: the library baseline;
//   dispatch_fp8 its rows as FP8 row records (formats/fp8_row_record.h), the FP8 dispatch.
// Each op starts on all ranks together (a host barrier); a rank launches all its iterations back
// to back and synchronises only after them, so every rank has launched an iteration before any
// waits for it. Bytes are those leaving a rank (rows for its own experts stay), bf16 [H] a row.
// Reported: ms, the max over ranks of each rank's median; MB, the mean over ranks; GB/s, the min
// over ranks of a rank's bytes over its median; vs_nccl, GB/s over the all-to-all's.
// Then the layer (layer_bench.h): EpMoeLayer forward + backward of the preset on every rank,
// --tokens a rank routed by its router, against the one-GPU MoeLayer on the same tokens per GPU.
// --only transfers|layer runs one part. --chunks 1,4 --transfer-sms 16,24 times the layer once
// for each chunk count, and a pipelined one (chunks > 1) for each transfer SM count;
// --fp8-dispatch times each of them with the FP8 dispatch too.
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
#include "ep_bench/layer_bench.h"
#include "formats/fp8_row_record.h"
#include "ep_bench/workload.h"
#include "bench/layer_flops.h"
#include "moefuse/config.h"
#include "moefuse/health.h"

namespace moefuse::ep_bench {
namespace {

using bench::DeviceBuffer;

// A rank that finishes no step for this long is taken to hang: its kernels cannot be cancelled.
constexpr auto kStallLimit = std::chrono::seconds(60);
constexpr int kOps = 4;
constexpr const char* kOpNames[kOps] = {"dispatch", "return_rows", "all_to_all", "dispatch_fp8"};
constexpr int kAllToAll = 2;  // the baseline of vs_nccl
struct Options {
  std::string preset;
  bool transfers = true, layer = true;  // the parts to run (--only)
  std::vector<EpLayerOptions> layers;   // the layer's configurations (--chunks, --transfer-sms)
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
  std::vector<LayerTiming> layers;  // one per Options::layers
};

// Progress steps of a rank: construct, the ops, check (transfers); the layer.
int steps_of(const Options& o) {
  return (o.transfers ? kOps + 2 : 0) + (o.layer ? int(o.layers.size()) : 0);
}

// "1,4" → {1, 4}; each in [1, 1024].
std::vector<int> int_list(const std::string& text, const std::string& name) {
  std::vector<int> out;
  size_t at = 0;
  while (at <= text.size()) {
    const size_t comma = std::min(text.find(',', at), text.size());
    const std::string item = text.substr(at, comma - at);
    char* end = nullptr;
    const long v = std::strtol(item.c_str(), &end, 10);
    MOEFUSE_EXPECT(!item.empty() && *end == '\0' && v >= 1 && v <= 1024, "--" + name,
                   "a comma-separated list of integers in [1, 1024]", "'" + text + "'");
    out.push_back(int(v));
    at = comma + 1;
  }
  return out;
}

// What the layer's name says of a configuration: "chunks 4, 16 SMs" or "chunks 1".
std::string layer_name(const EpLayerOptions& l) {
  return "chunks " + std::to_string(l.chunks) +
         (l.chunks > 1 ? ", " + std::to_string(l.transfer_sms) + " SMs" : "") +
         (l.fp8_dispatch ? ", fp8 dispatch" : "");
}

// What rank `rank`'s op `op` moves off the GPU.
int64_t bytes_out(const Workload& w, int op, int rank) {
  if (op == 0) return w.dispatch_bytes(rank);
  if (op == 1) return w.return_bytes(rank);
  if (op == 3) return w.dispatch_bytes(rank) / (2 * w.hidden) * formats::fp8_record_bytes(w.hidden);
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
  const int64_t record_bytes = formats::fp8_record_bytes(H);
  const DeviceBuffer xs(size_t(2 * rows * H)), offsets = bench::upload(w.offsets[rank]),
      records(size_t(rows * record_bytes));
  bench::fill_uniform_bf16(xs.get(), size_t(rows * H), -1, 1, o.seed + rank, stream);
  // Any bytes serve the transfer: the records' content is never decoded here.
  bench::fill_uniform_bf16(records.get(), records.bytes() / 2, -1, 1, o.seed + 3 * R + rank,
                           stream);

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
  if (o.transfers) {
    state.stage = "construct";
    // Every rank permutes exactly tokens·k rows: a plan of that many one-row tokens.
    dist::EpComm ep(comm,
                    dist::make_ep_plan({.experts = int(E), .ranks = R, .rank = rank,
                                        .max_tokens_per_rank = rows, .top_k = 1}),
                    int(H));
    const TensorView xs_view = xs.view(DType::kBFloat16, {rows, H});
    const TensorView records_view = records.view(DType::kUInt8, {rows, record_bytes});
    const TensorView offsets_view = offsets.view(DType::kInt32, {E + 1});
    const std::function<void(cudaStream_t)> ops[kOps] = {
        [&](cudaStream_t s) { ep.dispatch(xs_view, offsets_view, s); },
        [&](cudaStream_t s) { ep.return_rows(ep.received(), s); }, all_to_all,
        [&](cudaStream_t s) { ep.dispatch(records_view, offsets_view, s); }};
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
  for (const EpLayerOptions& l : o.layer ? o.layers : std::vector<EpLayerOptions>{}) {
    state.stage = "layer";
    state.layers.push_back(time_ep_layer(preset(o.preset), l, o.tokens,
                                         o.seed + 7919 * (rank + 1), o.warmup, o.iters, comm,
                                         together));
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
    bench::progress("[" + std::to_string(std::min(states[slowest].steps + 1, steps_of(o))) +
                    "/" + std::to_string(steps_of(o)) + "] " + states[slowest].stage.load() +
                    " on " +
                    std::to_string(o.ranks) + " GPUs");
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  bench::progress_done();
  for (auto& t : threads) t.join();
}

// The transfers' summary table and the per-rank one.
void report_transfers(const Options& o, const Workload& w, const std::vector<RankState>& states,
                      bench::Report& summary, bench::Report& per_rank) {
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
    summary.add_row({std::string(kOpNames[op]), ms[op], mb[op], gbs[op], gbs[op] / gbs[kAllToAll]});
}

// The layer per rank and on one GPU, and each rank's stages.
void report_layer(const Options& o, const std::vector<RankState>& states,
                  const LayerTiming& one_gpu, bench::Report& layer, bench::Report& stages) {
  const MoeConfig c = preset(o.preset);
  const auto row = [&](const std::string& who, const std::string& how, const LayerTiming& t) {
    const bench::Flops f = bench::model_flops(c, t.tokens);
    layer.add_row({who, how, static_cast<long long>(t.local_experts), t.forward_ms, t.step_ms,
                   t.graph_step_ms, (f.forward + f.backward) / t.graph_step_ms / 1e9,
                   t.transfer_ms, t.exposed_transfer_ms, t.exposed_transfer_ms / t.step_ms});
  };
  for (size_t i = 0; i < o.layers.size(); ++i)
    for (int r = 0; r < o.ranks; ++r) {
      const LayerTiming& t = states[r].layers[i];
      const std::string how = layer_name(o.layers[i]);
      row("rank " + std::to_string(r), how, t);
      for (const auto& [stage, ms] : t.stages)
        stages.add_row({static_cast<long long>(r), how, std::string(layer_stage_name(stage)),
                        layer_stage_is_backward(stage) ? "bwd" : "fwd", ms * 1e3});
    }
  row("one GPU, all experts", "-", one_gpu);
}

int run(int argc, char** argv) {
  bench::Args args(argc, argv, 1);
  if (args.flag("help")) {
    std::printf("usage: moefuse-ep-bench [--preset qwen3-30b-a3b] [--tokens 8192] [--ranks all]\n"
                "       [--only transfers|layer] [--chunks 1] [--transfer-sms 16] [--fp8-dispatch]\n"
                "       [--warmup 5] [--iters 30] [--seed random]\n"
                "       [--json FILE]\n");
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
  const std::string only = args.get("only", "");
  MOEFUSE_EXPECT(only.empty() || only == "transfers" || only == "layer", "--only",
                 "transfers or layer", "'" + only + "'");
  o.transfers = only != "layer";
  o.layer = only != "transfers";
  const std::vector<int> chunks = int_list(args.get("chunks", "1"), "chunks");
  const std::vector<int> sms = int_list(args.get("transfer-sms", "16"), "transfer-sms");
  const bool fp8 = args.flag("fp8-dispatch");
  for (int n : chunks)
    for (int s : n > 1 ? sms : std::vector<int>{sms.front()})
      for (bool f : fp8 ? std::vector<bool>{false, true} : std::vector<bool>{false})
        o.layers.push_back({.chunks = n, .transfer_sms = s, .fp8_dispatch = f});
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

  const std::string sizes = std::to_string(c.hidden) + ", " + std::to_string(c.ffn) + ", " +
                            std::to_string(c.num_experts) + ", " + std::to_string(c.top_k);
  bench::Report summary("ep: EpComm vs NCCL all-to-all, per rank (ms: max over ranks of the "
                        "medians, MB: mean, GB/s: the slowest rank's)",
                        {"op", "ms", "MB_out", "GB/s", "vs_nccl"});
  bench::Report per_rank("ep: each rank", {"op", "rank", "median_ms", "MB_out", "GB/s"});
  bench::Report layer("ep layer: EpMoeLayer forward + backward per rank (TFLOP/s: model FLOPs of "
                      "the rank's tokens over the graph step; transfer: the time some transfer "
                      "stage runs; exposed: of that, the time no other stage runs, on any "
                      "stream; share: exposed over the eager step)",
                      {"who", "layer", "experts", "fwd_ms", "step_ms", "graph_step_ms",
                       "TFLOP/s", "transfer_ms", "exposed_ms", "exposed_share"});
  bench::Report stages("ep layer: stages per rank and step (eager steps, device events; a "
                       "stage's runs in a step summed; stages on other streams overlap)",
                       {"rank", "layer", "stage", "pass", "median_us"});
  std::vector<bench::Report*> tables;
  if (o.transfers) {
    report_transfers(o, w, states, summary, per_rank);
    tables.insert(tables.end(), {&summary, &per_rank});
  }
  if (o.layer) {
    MOEFUSE_CUDA_CHECK(cudaSetDevice(0));
    bench::progress("one-GPU layer on GPU 0");
    const LayerTiming one_gpu = time_one_gpu_layer(c, o.tokens, o.seed, o.warmup, o.iters);
    bench::progress_done();
    report_layer(o, states, one_gpu, layer, stages);
    tables.insert(tables.end(), {&layer, &stages});
  }
  bench::Report& first = *tables.front();
  first.set_meta("preset", o.preset);
  first.set_meta("ranks", static_cast<long long>(o.ranks));
  first.set_meta("tokens per rank", static_cast<long long>(o.tokens));
  first.set_meta("H, F, E, k", sizes);
  first.set_meta("iterations", static_cast<long long>(o.iters));
  first.set_meta("reproduce", reproduce);
  for (const bench::Report* t : tables) t->print();
  if (!json.empty())
    bench::write_json_file(json, args.command(), {tables.begin(), tables.end()});
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
