#include "bench/timing.h"

#include <algorithm>
#include <vector>

#include "cuda/check.h"

namespace moefuse::bench {

Timing time_on_stream(const std::function<void(cudaStream_t)>& launch, cudaStream_t stream,
                      int warmup, int iters) {
  for (int i = 0; i < warmup; ++i) launch(stream);
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

}  // namespace moefuse::bench
