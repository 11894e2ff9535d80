#include "cuda/layer/layer_handles.h"

#include <string>

#include "cuda/check.h"
#include "cuda/device.h"
#include "moefuse/error.h"

namespace moefuse::layer {

LayerHandles::LayerHandles() {
  MOEFUSE_CUDA_CHECK(cudaGetDevice(&device));
  if (cublasCreate(&cublas) != CUBLAS_STATUS_SUCCESS)
    throw CudaError("cublasCreate", "could not create a cuBLAS handle", __FILE__, __LINE__);
  try {
    MOEFUSE_CUDA_CHECK(cudaStreamCreateWithFlags(&side, cudaStreamNonBlocking));
    for (cudaEvent_t* e : {&fork_event, &shared_done, &join})
      MOEFUSE_CUDA_CHECK(cudaEventCreateWithFlags(e, cudaEventDisableTiming));
  } catch (...) {
    release();
    throw;
  }
}

LayerHandles::~LayerHandles() { release(); }

void LayerHandles::release() noexcept {
  for (cudaEvent_t* e : {&fork_event, &shared_done, &join}) {
    if (*e) cudaEventDestroy(*e);
    *e = nullptr;
  }
  if (side) cudaStreamDestroy(side);
  side = nullptr;
  if (cublas) cublasDestroy(cublas);
  cublas = nullptr;
}

void LayerHandles::fork(cudaEvent_t event, cudaStream_t from, cudaStream_t to) {
  MOEFUSE_CUDA_CHECK(cudaEventRecord(event, from));
  MOEFUSE_CUDA_CHECK(cudaStreamWaitEvent(to, event, 0));
}

void LayerHandles::expect_launchable_here(cudaStream_t stream, std::string_view owner) const {
  const int current = cuda::expect_launchable(stream);
  MOEFUSE_EXPECT(current == device, "current device",
                 "device " + std::to_string(device) + ", on which this " + std::string(owner) +
                     " was created (its cuBLAS handle, second stream and events belong to it)",
                 "device " + std::to_string(current));
}

}  // namespace moefuse::layer
