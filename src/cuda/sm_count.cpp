#include "cuda/sm_count.h"

#include <cuda_runtime.h>

#include "cuda/check.h"

namespace moefuse::cuda {

int device_sm_count() {
  int device = 0, sms = 0;
  MOEFUSE_CUDA_CHECK(cudaGetDevice(&device));
  MOEFUSE_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  return sms;
}

}  // namespace moefuse::cuda
