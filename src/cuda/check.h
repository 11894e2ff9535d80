// CUDA error checks that throw moefuse::CudaError with the failing call and its location.
#pragma once

#include <cuda_runtime.h>

#include "moefuse/error.h"

#define MOEFUSE_CUDA_CHECK(call)                                                        \
  do {                                                                                  \
    cudaError_t moefuse_status_ = (call);                                               \
    if (moefuse_status_ != cudaSuccess)                                                 \
      throw ::moefuse::CudaError(#call, cudaGetErrorString(moefuse_status_), __FILE__, \
                                 __LINE__);                                             \
  } while (0)

// After a kernel launch: catches bad launch configurations without synchronising.
#define MOEFUSE_CUDA_CHECK_LAUNCH() MOEFUSE_CUDA_CHECK(cudaGetLastError())
