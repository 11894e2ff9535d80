// The current device's SM count, for persistent and grid-stride launches (read from the device,
// never hard-coded). Throws moefuse::CudaError when the query fails.
#pragma once

namespace moefuse::cuda {

int device_sm_count();

}  // namespace moefuse::cuda
