// The CUDA resources of EpMoeLayer's chunked forward: a stream for the transfers (the expert GEMMs
// stay on the caller's stream) and the events that hand each chunk from one to the other.
//
//   transfer stream: dispatch 0, dispatch 1, ..., return 0, return 1, ...
//   caller's stream: [wait dispatched g] FC1 g, FC2 g [record computed g], ...
// Return g waits for computed g; the caller's stream waits for `returned` before the combine.
#pragma once

#include <cuda_runtime.h>

#include <vector>

namespace moefuse::dist {

class EpPipeline {
 public:
  explicit EpPipeline(int chunks);  // on the current device; CudaError if a handle fails
  ~EpPipeline();
  EpPipeline(const EpPipeline&) = delete;
  EpPipeline& operator=(const EpPipeline&) = delete;

  cudaStream_t transfer = nullptr;
  cudaEvent_t start = nullptr, returned = nullptr;
  std::vector<cudaEvent_t> dispatched, computed;  // one a chunk

 private:
  void release() noexcept;
};

}  // namespace moefuse::dist
