#include "cuda/device.h"

#include <cuda_runtime.h>

namespace moefuse::cuda {

DeviceInfo current_device(std::string* why) {
  DeviceInfo info;
  int ordinal = 0;
  cudaError_t status = cudaGetDevice(&ordinal);
  cudaDeviceProp prop{};
  if (status == cudaSuccess) status = cudaGetDeviceProperties(&prop, ordinal);
  if (status != cudaSuccess) {
    if (why) *why = std::string("no usable CUDA device: ") + cudaGetErrorString(status);
    cudaGetLastError();  // clear the sticky-free error so later calls report their own
    return info;
  }
  info.ordinal = ordinal;
  info.name = prop.name;
  info.sm_major = prop.major;
  info.sm_minor = prop.minor;
  info.num_sms = prop.multiProcessorCount;
  info.l2_bytes = prop.l2CacheSize;
  info.max_smem_per_block_optin = static_cast<int>(prop.sharedMemPerBlockOptin);
  return info;
}

bool hopper_available(std::string* why) {
  DeviceInfo info = current_device(why);
  if (info.ordinal < 0) return false;
  if (info.sm_major != 9 || info.sm_minor != 0) {
    if (why)
      *why = "device " + info.name + " is sm_" + std::to_string(info.sm_major) +
             std::to_string(info.sm_minor) + "; moefuse kernels are built for sm_90a (Hopper)";
    return false;
  }
  return true;
}

}  // namespace moefuse::cuda
