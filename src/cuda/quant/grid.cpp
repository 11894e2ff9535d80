#include "cuda/quant/grid.h"

#include <cuda_runtime_api.h>

#include <algorithm>

#include "cuda/check.h"

namespace moefuse::cuda::quant {

int64_t grid_stride_ctas(int64_t items, int64_t items_per_cta, int sms) {
  const int64_t wanted = (items + items_per_cta - 1) / items_per_cta;
  return std::max<int64_t>(1, std::min<int64_t>(wanted, int64_t(sms) * kMaxCtasPerSm));
}

int current_sm_count() {
  int device = 0, sms = 0;
  MOEFUSE_CUDA_CHECK(cudaGetDevice(&device));
  MOEFUSE_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  return sms;
}

}  // namespace moefuse::cuda::quant
