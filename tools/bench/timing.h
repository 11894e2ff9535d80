// Event timing on the device: warm up, then the median of many timed launches.
#pragma once

#include <cuda_runtime.h>

#include <functional>
#include <string>

namespace moefuse::bench {

struct Timing {
  double median_ms = 0;
  double min_ms = 0;
  int iterations = 0;
};

// Runs `launch(stream)` `warmup` times, then `iters` times each bracketed by CUDA events, and
// returns the median and the minimum. `launch` must only enqueue work on `stream`.
// warm_ms > 0: the warm-up also goes on, in batches, until the device has spent that many
// milliseconds on it. An H200 at its power limit sets its clock from about the last second of
// load, so a run timed after a few launches measures the clock an idle spell left (run 42, call
// 6: after ~1 s of replays qwen3's layer read 1.7-2% slower, dense cuBLAS 16% slower); a
// training run sees the warm one.
Timing time_on_stream(const std::function<void(cudaStream_t)>& launch, cudaStream_t stream,
                      int warmup, int iters, int warm_ms = 0);

// The reports' "timing" note: "median of `iters` after `warmup` warm-up[ and at least `warm_ms`
// ms of warm-up], CUDA events".
std::string timing_note(int warmup, int iters, int warm_ms);

}  // namespace moefuse::bench
