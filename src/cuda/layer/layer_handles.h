// What a layer object owns on its device: the cuBLAS handle of the router's GEMMs, the second
// stream (the shared expert; EpMoeLayer's weight gradients and received-row copies) and the
// events that fork work to it and join it back.
// Created on the device current at construction, which becomes the layer's.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <string_view>

namespace moefuse::layer {

class LayerHandles {
 public:
  LayerHandles();  // CudaError when a handle cannot be created (none is leaked)
  ~LayerHandles();
  LayerHandles(const LayerHandles&) = delete;
  LayerHandles& operator=(const LayerHandles&) = delete;

  // Records `event` on `from` and makes `to` wait for it.
  static void fork(cudaEvent_t event, cudaStream_t from, cudaStream_t to);
  // expect_launchable(stream), then the current device must be this one (InvalidArgument naming
  // "current device"; `owner` names the object, e.g. "MoeLayer").
  void expect_launchable_here(cudaStream_t stream, std::string_view owner) const;

  int device = -1;
  cublasHandle_t cublas = nullptr;
  cudaStream_t side = nullptr;
  cudaEvent_t fork_event = nullptr, shared_done = nullptr, join = nullptr;

 private:
  void release() noexcept;
};

}  // namespace moefuse::layer
