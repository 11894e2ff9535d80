#include "cuda/device.h"

#include <cuda_runtime.h>

#include <atomic>
#include <cstdint>

#include "moefuse/error.h"

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

int hopper_devices(int min_count, std::string* why) {
  int n = 0;
  const cudaError_t status = cudaGetDeviceCount(&n);
  if (status != cudaSuccess) {
    cudaGetLastError();
    if (why) *why = std::string("no usable CUDA device: ") + cudaGetErrorString(status);
    return 0;
  }
  if (n < min_count) {
    if (why) *why = std::to_string(n) + " CUDA device(s), " + std::to_string(min_count) + " needed";
    return 0;
  }
  for (int d = 0; d < n; ++d) {
    int major = 0, minor = 0;
    if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, d) != cudaSuccess ||
        cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, d) != cudaSuccess) {
      cudaGetLastError();
      major = minor = 0;
    }
    if (major != 9 || minor != 0) {
      if (why)
        *why = "device " + std::to_string(d) + " is sm_" + std::to_string(major * 10 + minor);
      return 0;
    }
  }
  return n;
}

namespace {

// Per device ordinal: true once it was seen to be sm_90. Only the positive answer is kept: the
// negative one throws, off the hot path. Ordinals past the table are asked every time.
constexpr int kCachedOrdinals = 64;
std::atomic<bool> g_is_hopper[kCachedOrdinals];

[[noreturn]] void throw_no_device(cudaError_t status) {
  cudaGetLastError();  // not sticky: clear it so later calls report their own
  throw NotSupported(std::string("no CUDA device: ") + cudaGetErrorString(status));
}

void expect_hopper(int ordinal) {
  int major = 0, minor = 0;
  cudaError_t status = cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, ordinal);
  if (status == cudaSuccess)
    status = cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, ordinal);
  if (status != cudaSuccess) throw_no_device(status);
  if (major != 9 || minor != 0)
    throw NotSupported("moefuse's kernels are built for sm_90a (Hopper); the current device " +
                       std::to_string(ordinal) + " is sm_" + std::to_string(major) +
                       std::to_string(minor));
}

// The last stream this thread saw pass the check, and its device. A layer pass calls ~20 entry
// points on the same stream, each of which would otherwise repeat the driver queries below. A
// handle destroyed and reissued for another device's stream then passes here and fails at its
// first launch with a CudaError, as a stream being captured does.
struct CheckedStream {
  cudaStream_t stream = nullptr;
  int device = -1;
};
thread_local CheckedStream t_last_checked;

}  // namespace

int expect_launchable(cudaStream_t stream) {
  int ordinal = 0;
  const cudaError_t status = cudaGetDevice(&ordinal);
  if (status != cudaSuccess) throw_no_device(status);
  const bool cacheable = ordinal >= 0 && ordinal < kCachedOrdinals;
  if (!cacheable || !g_is_hopper[ordinal].load(std::memory_order_relaxed)) {
    expect_hopper(ordinal);
    if (cacheable) g_is_hopper[ordinal].store(true, std::memory_order_relaxed);
  }
  if (stream == nullptr || stream == cudaStreamLegacy || stream == cudaStreamPerThread)
    return ordinal;
  if (stream == t_last_checked.stream && ordinal == t_last_checked.device) return ordinal;
  // cudaStreamGetDevice is not permitted on a capturing stream: it fails and invalidates the
  // capture (run 10). A stream being captured is taken as it is; one of another device fails at
  // its first launch, with a CudaError. cudaStreamIsCapturing is permitted during capture, and a
  // bad handle makes it fail, which the query below then reports.
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  if (cudaStreamIsCapturing(stream, &capture) != cudaSuccess) cudaGetLastError();
  if (capture != cudaStreamCaptureStatusNone) return ordinal;
  // Another stream of this thread may be capturing in the global mode, which forbids the query
  // too; the relaxed mode, for this call alone, permits it and leaves that capture intact.
  cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
  cudaThreadExchangeStreamCaptureMode(&mode);
  int stream_device = 0;
  const cudaError_t got = cudaStreamGetDevice(stream, &stream_device);
  cudaThreadExchangeStreamCaptureMode(&mode);
  if (got != cudaSuccess) {
    cudaGetLastError();  // not sticky: clear it so later launch checks report their own
    // Only these say the handle is bad; anything else (e.g. the sticky error of an earlier
    // asynchronous launch, which this call may also return) is a CUDA failure, not the argument.
    if (got != cudaErrorInvalidResourceHandle && got != cudaErrorInvalidValue &&
        got != cudaErrorContextIsDestroyed)
      throw CudaError("cudaStreamGetDevice(stream, &stream_device)", cudaGetErrorString(got),
                      __FILE__, __LINE__);
    throw InvalidArgument("stream", "a stream of the current device " + std::to_string(ordinal),
                          std::string("a stream whose device cannot be read: ") +
                              cudaGetErrorString(got));
  }
  MOEFUSE_EXPECT(stream_device == ordinal, "stream",
                 "a stream of the current device " + std::to_string(ordinal),
                 "one of device " + std::to_string(stream_device));
  t_last_checked = {.stream = stream, .device = ordinal};
  return ordinal;
}

}  // namespace moefuse::cuda
