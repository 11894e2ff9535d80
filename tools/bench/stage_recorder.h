// A LayerObserver that times every stage of the layer calls it observes with CUDA events.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <map>
#include <utility>
#include <vector>

#include "cuda/check.h"
#include "moefuse/layer.h"

namespace moefuse::bench {

// Records a CUDA event pair around every stage of every observed step.
class StageRecorder : public LayerObserver {
 public:
  ~StageRecorder() override {
    for (auto& [stage, runs] : events_)
      for (auto& [b, e] : runs) cudaEventDestroy(b), cudaEventDestroy(e);
  }
  void begin(LayerStage stage, cudaStream_t stream) override {
    cudaEvent_t b = nullptr, e = nullptr;
    MOEFUSE_CUDA_CHECK(cudaEventCreate(&b));
    MOEFUSE_CUDA_CHECK(cudaEventCreate(&e));
    MOEFUSE_CUDA_CHECK(cudaEventRecord(b, stream));
    events_[stage].push_back({b, e});
  }
  void end(LayerStage stage, cudaStream_t stream) override {
    MOEFUSE_CUDA_CHECK(cudaEventRecord(events_[stage].back().second, stream));
  }
  // Median ms per stage, in stage order (call after the stream synchronised).
  std::vector<std::pair<LayerStage, double>> medians() const {
    std::vector<std::pair<LayerStage, double>> out;
    for (const auto& [stage, runs] : events_) {
      std::vector<double> ms;
      for (const auto& [b, e] : runs) {
        float t = 0;
        MOEFUSE_CUDA_CHECK(cudaEventElapsedTime(&t, b, e));
        ms.push_back(t);
      }
      std::sort(ms.begin(), ms.end());
      out.push_back({stage, ms[ms.size() / 2]});
    }
    return out;
  }

 private:
  std::map<LayerStage, std::vector<std::pair<cudaEvent_t, cudaEvent_t>>> events_;
};

}  // namespace moefuse::bench
