// moefuse-fuzz: random MoE layers (common/fuzz_case.h) forward + backward on the GPU against the
// CPU reference, with the layer tests' tolerances (common/layer_step.h). One line per case,
// PASS or FAIL with the command that reruns it, then `fuzz: N cases, F failures, S s`; exit 1 on
// any failure. Without an sm_90 GPU it says why and exits 0.
//
//   moefuse-fuzz [--seed S] [--case N | --cases N] [--seconds N]
//   --seed S     the seed of the cases (default: a fresh one, printed)
//   --case N     run case N alone
//   --cases N    run cases 0..N-1 (default 10 without --seconds)
//   --seconds N  run cases 0, 1, ... until N seconds have passed (at least one case)
#include <cuda_runtime.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include "common/fuzz_case.h"
#include "common/layer_step.h"
#include "cuda/check.h"
#include "cuda/device.h"
#include "gpu/layer_test_fixture.h"
#include "moefuse/health.h"
#include "moefuse/layer.h"

namespace moefuse {
namespace {

struct Args {
  uint64_t seed = 0;
  int64_t first = 0;
  int64_t cases = -1;  // -1: until the time is up (or 10 without --seconds)
  double seconds = 0;
};

[[noreturn]] void usage(const std::string& why) {
  std::fprintf(stderr, "moefuse-fuzz: %s\nusage: moefuse-fuzz [--seed S] [--case N | --cases N] "
                       "[--seconds N]\n", why.c_str());
  std::exit(2);
}

Args parse(int argc, char** argv) {
  Args a{.seed = (uint64_t{std::random_device{}()} << 32) ^ std::random_device{}()};
  for (int i = 1; i < argc; ++i) {
    const std::string_view flag = argv[i];
    if (i + 1 >= argc) usage("missing value after " + std::string(flag));
    const std::string value = argv[++i];
    try {
      if (flag == "--seed") a.seed = std::stoull(value);
      else if (flag == "--case") a.first = std::stoll(value), a.cases = 1;
      else if (flag == "--cases") a.cases = std::stoll(value);
      else if (flag == "--seconds") a.seconds = std::stod(value);
      else usage("unknown option " + std::string(flag));
    } catch (const std::logic_error&) {
      usage("bad value '" + value + "' for " + std::string(flag));
    }
  }
  if (a.cases < 0 && a.seconds <= 0) a.cases = 10;
  return a;
}

// T = 0: the layer documents T >= 1, so it must refuse the call (InvalidArgument), not run it.
std::vector<std::string> check_refuses_no_tokens(const test::FuzzCase& fc, cudaStream_t stream) {
  const MoeConfig& c = fc.config;
  std::vector<std::string> misses;
  try {
    layer_memory_plan(c, fc.options, 0);
    misses.push_back("layer_memory_plan accepted T = 0");
  } catch (const InvalidArgument&) {
  }
  MoeLayer layer(c, fc.options);
  test::DeviceLayer d(c, fc.options, 1);  // real buffers, only x has no rows
  try {
    layer.forward(TensorView::contiguous(d.x.data(), DType::kBFloat16, {0, c.hidden},
                                         Device::kCuda),
                  d.weights(), d.outputs(), d.cache_region(), d.workspace_region(), stream);
    misses.push_back("forward accepted x with T = 0");
  } catch (const InvalidArgument&) {
  }
  MOEFUSE_CUDA_CHECK(cudaStreamSynchronize(stream));
  return misses;
}

// The layer's step on the GPU (outputs, gradients, cache and workspace poisoned first; the
// workspace again between forward and backward) against the reference step on the same data.
std::vector<std::string> run_case(const test::FuzzCase& fc, cudaStream_t stream) {
  if (fc.tokens == 0) return check_refuses_no_tokens(fc, stream);
  const test::LayerData data = test::fuzz_layer_data(fc);
  MoeLayer layer(fc.config, fc.options);
  test::DeviceLayer d(fc.config, fc.options, fc.tokens);
  d.upload(data);
  const int flags = test::run_poisoned_step(layer, d, stream);
  std::vector<std::string> misses =
      test::step_mismatches(test::download(d), test::reference_step(data));
  if (flags != 0) misses.push_back("health flags " + std::to_string(flags));
  return misses;
}

int fuzz(const Args& a) {
  std::string why;
  if (!cuda::hopper_available(&why)) {
    std::printf("moefuse-fuzz needs an sm_90 (Hopper) GPU: %s\nNothing was run.\n", why.c_str());
    return 0;
  }
  std::printf("moefuse-fuzz --seed %llu\n", static_cast<unsigned long long>(a.seed));
  cudaStream_t stream = nullptr;
  MOEFUSE_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  using Clock = std::chrono::steady_clock;
  const auto start = Clock::now();
  auto elapsed = [&] { return std::chrono::duration<double>(Clock::now() - start).count(); };
  int64_t run = 0, failures = 0;
  for (int64_t n = a.first;; ++n) {
    if (a.cases >= 0 && run >= a.cases) break;
    if (a.seconds > 0 && run > 0 && elapsed() >= a.seconds) break;
    const test::FuzzCase fc = test::draw_fuzz_case(a.seed, n);
    const double t0 = elapsed();
    std::vector<std::string> misses;
    bool sticky = false;
    try {
      misses = run_case(fc, stream);
    } catch (const std::exception& e) {
      misses.push_back(std::string("exception: ") + e.what());
      // A kernel fault poisons the context: later cases could not run.
      sticky = cudaDeviceSynchronize() != cudaSuccess;
    }
    ++run;
    failures += !misses.empty();
    std::printf("%s %s  # %s (%.1f s)\n", misses.empty() ? "PASS" : "FAIL",
                test::repro_command(fc).c_str(), test::describe(fc).c_str(), elapsed() - t0);
    for (const std::string& m : misses) std::printf("    %s\n", m.c_str());
    std::fflush(stdout);
    if (sticky) {
      std::printf("the CUDA context is broken (sticky error): stopping\n");
      break;
    }
  }
  cudaStreamDestroy(stream);
  std::printf("fuzz: %lld cases, %lld failures, %.0f s\n", static_cast<long long>(run),
              static_cast<long long>(failures), elapsed());
  return failures > 0 ? 1 : 0;
}

}  // namespace
}  // namespace moefuse

int main(int argc, char** argv) {
  try {
    return moefuse::fuzz(moefuse::parse(argc, argv));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "moefuse-fuzz: %s\n", e.what());
    return 1;
  }
}
