// A captured and instantiated CUDA graph of `body`'s work on a stream, launched as one unit.
#pragma once

#include <cuda_runtime.h>

#include <functional>

#include "cuda/check.h"

namespace moefuse::bench {

class Graph {
 public:
  Graph(const std::function<void(cudaStream_t)>& body, cudaStream_t stream) {
    MOEFUSE_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
    body(stream);
    MOEFUSE_CUDA_CHECK(cudaStreamEndCapture(stream, &graph_));
    MOEFUSE_CUDA_CHECK(cudaGraphInstantiate(&exec_, graph_, 0));
  }
  ~Graph() {
    if (exec_) cudaGraphExecDestroy(exec_);
    if (graph_) cudaGraphDestroy(graph_);
  }
  void launch(cudaStream_t s) const { MOEFUSE_CUDA_CHECK(cudaGraphLaunch(exec_, s)); }

 private:
  cudaGraph_t graph_ = nullptr;
  cudaGraphExec_t exec_ = nullptr;
};

}  // namespace moefuse::bench
