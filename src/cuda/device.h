// What the current CUDA device is, read from the device (never hard-coded).
#pragma once

#include <cuda_runtime.h>

#include <string>

namespace moefuse::cuda {

struct DeviceInfo {
  int ordinal = -1;
  std::string name;
  int sm_major = 0, sm_minor = 0;
  int num_sms = 0;
  int l2_bytes = 0;
  int max_smem_per_block_optin = 0;
};

// The current device, or nullopt-like info (ordinal -1) with `why` set when there is none usable
// (no driver, no device). Never throws.
DeviceInfo current_device(std::string* why = nullptr);

// True when an sm_90 device is present, which every moefuse kernel needs. Otherwise `why` says why
// not (for GTEST_SKIP and for the benchmark's "no GPU" message).
bool hopper_available(std::string* why = nullptr);

// The number of CUDA devices when there are at least `min_count` and every one is sm_90, else 0
// with `why` set: what the multi-GPU tests and moefuse-ep-bench need. Never throws.
int hopper_devices(int min_count, std::string* why = nullptr);

// The check every public GPU entry point makes after validating its arguments and before any CUDA
// work; returns the current device's ordinal. Legal during stream capture (see device.cpp):
//   NotSupported unless the current device is sm_90 ("no CUDA device: <why>" without one). The
//   answer is cached per device ordinal, so the hot path is one cudaGetDevice.
//   InvalidArgument naming "stream" when `stream` belongs to another device or is not a valid
//   handle (CudaError when the query fails otherwise, e.g. on an earlier launch's sticky error).
//   The default, legacy and per-thread streams always belong to the current one.
// Buffers on another device are not detected (a TensorView carries no ordinal).
int expect_launchable(cudaStream_t stream);

}  // namespace moefuse::cuda
