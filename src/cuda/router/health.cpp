#include "moefuse/health.h"

#include "cuda/check.h"
#include "cuda/device.h"
#include "cuda/router/checks.h"
#include "moefuse/error.h"

namespace moefuse {

void reset_health_flags(const TensorView& health, cudaStream_t stream) {
  MOEFUSE_EXPECT(!is_absent(health), "health", "a [1] int32 device tensor", "an empty view");
  int32_t* flag = cuda::expect_health(health);
  cuda::expect_launchable(stream);
  MOEFUSE_CUDA_CHECK(cudaMemsetAsync(flag, 0, sizeof(int32_t), stream));
}

int32_t read_health_flags(const TensorView& health, cudaStream_t stream) {
  MOEFUSE_EXPECT(!is_absent(health), "health", "a [1] int32 device tensor", "an empty view");
  int32_t* flag = cuda::expect_health(health);
  cuda::expect_launchable(stream);
  int32_t bits = 0;
  MOEFUSE_CUDA_CHECK(cudaMemcpyAsync(&bits, flag, sizeof bits, cudaMemcpyDeviceToHost, stream));
  MOEFUSE_CUDA_CHECK(cudaStreamSynchronize(stream));
  return bits;
}

}  // namespace moefuse
