// Event timing on the device: warm up, then the median of many timed launches.
#pragma once

#include <cuda_runtime.h>

#include <functional>

namespace moefuse::bench {

struct Timing {
  double median_ms = 0;
  double min_ms = 0;
  int iterations = 0;
};

// Runs `launch(stream)` `warmup` times, then `iters` times each bracketed by CUDA events, and
// returns the median and the minimum. `launch` must only enqueue work on `stream`.
Timing time_on_stream(const std::function<void(cudaStream_t)>& launch, cudaStream_t stream,
                      int warmup, int iters);

}  // namespace moefuse::bench
