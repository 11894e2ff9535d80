// A LayerObserver for the layer benchmarks (moefuse-bench layer, moefuse-ep-bench): CUDA events at
// every stage's begin and end, on whichever stream runs it, and one at each observed step's start.
// From them, per step: each stage's total time (a stage may run several times a step: the chunks
// of EpMoeLayer's pipeline) and, under expert parallelism, the exposed transfer time, the time in
// which some transfer stage runs and no other stage does, on any stream. Medians over the steps.
#pragma once

#include <cuda_runtime.h>

#include <map>
#include <vector>

#include "moefuse/layer.h"

namespace moefuse::bench {

class StepIntervals : public LayerObserver {
 public:
  ~StepIntervals() override;
  void begin(LayerStage stage, cudaStream_t stream) override;
  void end(LayerStage stage, cudaStream_t stream) override;
  // Marks the start of a step on `stream` (the layer's stream), before its first stage.
  void start_step(cudaStream_t stream);

  // After every observed step's work has finished.
  struct Medians {
    std::map<LayerStage, double> stage_ms;  // per step, summed over the stage's runs
    double transfer_ms = 0;                 // per step, the transfer stages' total
    double exposed_transfer_ms = 0;         // per step, transfer time not overlapped by compute
  };
  Medians medians() const;

 private:
  struct Run {
    LayerStage stage;
    cudaEvent_t begin, end;
  };
  std::vector<cudaEvent_t> steps_;      // each step's start
  std::vector<std::vector<Run>> runs_;  // each step's stage runs, in enqueue order
  cudaEvent_t record(cudaStream_t stream);
};

// The transfer stages of the layers (kEpDispatch, kEpReturn and their backward twins).
bool is_transfer(LayerStage s);

}  // namespace moefuse::bench
