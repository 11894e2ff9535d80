#include "bench/timing.h"

#include <algorithm>
#include <vector>

#include "cuda/check.h"

namespace moefuse::bench {

namespace {

// Device milliseconds of `n` launches enqueued back to back.
double launches_ms(const std::function<void(cudaStream_t)>& launch, cudaStream_t stream, int n) {
  cudaEvent_t start, stop;
  MOEFUSE_CUDA_CHECK(cudaEventCreate(&start));
  MOEFUSE_CUDA_CHECK(cudaEventCreate(&stop));
  MOEFUSE_CUDA_CHECK(cudaEventRecord(start, stream));
  for (int i = 0; i < n; ++i) launch(stream);
  MOEFUSE_CUDA_CHECK(cudaEventRecord(stop, stream));
  MOEFUSE_CUDA_CHECK_LAUNCH();
  MOEFUSE_CUDA_CHECK(cudaEventSynchronize(stop));
  float ms = 0;
  MOEFUSE_CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  return ms;
}

}  // namespace

Timing time_on_stream(const std::function<void(cudaStream_t)>& launch, cudaStream_t stream,
                      int warmup, int iters, int warm_ms) {
  if (warm_ms > 0) {
    // Batches doubling from `warmup` launches (at least one), up to 4096 a batch; at most 2^20
    // launches in all, should they take no time.
    double warmed = 0;
    for (int n = std::max(warmup, 1), launched = 0; warmed < warm_ms && launched < (1 << 20);
         launched += n, n = std::min(2 * n, 4096))
      warmed += launches_ms(launch, stream, n);
  } else {
    for (int i = 0; i < warmup; ++i) launch(stream);
  }
  MOEFUSE_CUDA_CHECK_LAUNCH();
  std::vector<cudaEvent_t> events(2 * iters);
  for (auto& e : events) MOEFUSE_CUDA_CHECK(cudaEventCreate(&e));
  for (int i = 0; i < iters; ++i) {
    MOEFUSE_CUDA_CHECK(cudaEventRecord(events[2 * i], stream));
    launch(stream);
    MOEFUSE_CUDA_CHECK(cudaEventRecord(events[2 * i + 1], stream));
  }
  MOEFUSE_CUDA_CHECK_LAUNCH();
  MOEFUSE_CUDA_CHECK(cudaStreamSynchronize(stream));
  std::vector<double> ms(iters);
  for (int i = 0; i < iters; ++i) {
    float t = 0;
    MOEFUSE_CUDA_CHECK(cudaEventElapsedTime(&t, events[2 * i], events[2 * i + 1]));
    ms[i] = t;
  }
  for (auto& e : events) cudaEventDestroy(e);
  std::sort(ms.begin(), ms.end());
  return {.median_ms = ms[iters / 2], .min_ms = ms.front(), .iterations = iters};
}

std::string timing_note(int warmup, int iters, int warm_ms) {
  return "median of " + std::to_string(iters) + " after " + std::to_string(warmup) + " warm-up" +
         (warm_ms > 0 ? " and at least " + std::to_string(warm_ms) + " ms of warm-up" : "") +
         ", CUDA events";
}

}  // namespace moefuse::bench
