// Device memory for the benchmarks: an owning buffer, and fresh random fills (never zeros:
// zeros hide unwritten outputs and run faster than real data on the tensor cores).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <vector>

#include "moefuse/tensor.h"

namespace moefuse::bench {

class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(size_t bytes);
  ~DeviceBuffer();
  DeviceBuffer(DeviceBuffer&& other) noexcept;
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  void* get() const { return ptr_; }
  size_t bytes() const { return bytes_; }
  // A contiguous cuda view of this buffer (throws if it does not fit).
  TensorView view(DType dtype, std::initializer_list<int64_t> shape) const;

 private:
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

// Uniform values in [lo, hi) from a counter hash of (seed, index); one kernel, no host copy.
void fill_uniform_bf16(void* dst, size_t count, float lo, float hi, uint64_t seed,
                       cudaStream_t stream);
void fill_uniform_fp32(void* dst, size_t count, float lo, float hi, uint64_t seed,
                       cudaStream_t stream);

// Copies a host vector into a new device buffer (synchronously: setup only, never timed).
template <class T>
DeviceBuffer upload(const std::vector<T>& host);

}  // namespace moefuse::bench
