// expert_offsets: offsets [E+1] from counts [E] in one block (E <= kDispatchMaxExperts).
#include <cuda_runtime.h>

#include "cuda/check.h"
#include "cuda/device.h"
#include "cuda/dispatch/dispatch_args.h"
#include "cuda/dispatch/offsets_scan.cuh"
#include "moefuse/dispatch.h"

namespace moefuse {
namespace cuda {
namespace {

__global__ void __launch_bounds__(kScanThreads)
    expert_offsets_kernel(const int32_t* counts, int32_t* offsets, int experts, int align) {
  __shared__ OffsetsScan::TempStorage storage;
  scan_offsets(storage, counts, align, experts, offsets);
}

}  // namespace
}  // namespace cuda

void expert_offsets(const TensorView& counts, const TensorView& offsets, int64_t align,
                    cudaStream_t stream) {
  cuda::check_expert_offsets(counts, offsets, align);
  cuda::expect_launchable(stream);
  cuda::expert_offsets_kernel<<<1, cuda::kScanThreads, 0, stream>>>(
      counts.as<const int32_t>(), offsets.as<int32_t>(), static_cast<int>(counts.size(0)),
      static_cast<int>(align));
  MOEFUSE_CUDA_CHECK_LAUNCH();
}

}  // namespace moefuse
