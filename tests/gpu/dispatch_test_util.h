// Helpers of the router/dispatch GPU tests: owning device buffers with poison, bf16 conversion,
// views, and bitwise comparison that reports the first differing index.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <numeric>
#include <string>
#include <vector>

#include "common/test_util.h"

#include "cuda/check.h"
#include "moefuse/tensor.h"
#include "ref/dispatch.h"

namespace moefuse::test {

// A device buffer bound to the stream of the kernels that use it: every upload, poison and
// download is enqueued on that stream, so it is ordered with those kernels whatever the stream's
// flags. (A plain cudaMemset/cudaMemcpy runs on the legacy default stream, which a
// cudaStreamNonBlocking stream does not wait for: a poison could land after the kernel's write.)
// Uploads and downloads wait for the stream, since the host side is a pageable vector. The
// default, the legacy default stream, suits kernels launched on it (stream nullptr) only.
template <class T>
class DeviceBuffer {
 public:
  explicit DeviceBuffer(size_t n, cudaStream_t stream = nullptr) : n_(n), stream_(stream) {
    if (n_) MOEFUSE_CUDA_CHECK(cudaMalloc(&ptr_, n_ * sizeof(T)));
  }
  explicit DeviceBuffer(const std::vector<T>& host, cudaStream_t stream = nullptr)
      : DeviceBuffer(host.size(), stream) {
    upload(host);
  }
  ~DeviceBuffer() { if (ptr_) cudaFree(ptr_); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  void upload(const std::vector<T>& host) {
    ASSERT_EQ(host.size(), n_);
    if (!n_) return;
    MOEFUSE_CUDA_CHECK(cudaMemcpyAsync(ptr_, host.data(), n_ * sizeof(T), cudaMemcpyHostToDevice,
                                       stream_));
    MOEFUSE_CUDA_CHECK(cudaStreamSynchronize(stream_));
  }
  std::vector<T> download() const {
    std::vector<T> host(n_);
    if (!n_) return host;
    MOEFUSE_CUDA_CHECK(cudaMemcpyAsync(host.data(), ptr_, n_ * sizeof(T), cudaMemcpyDeviceToHost,
                                       stream_));
    MOEFUSE_CUDA_CHECK(cudaStreamSynchronize(stream_));
    return host;
  }
  // 0xFF bytes: NaN for fp32/bf16; for int32 pass 0x7F (a huge index no op ever writes).
  void poison(int byte = 0xFF) {
    if (n_) MOEFUSE_CUDA_CHECK(cudaMemsetAsync(ptr_, byte, n_ * sizeof(T), stream_));
  }
  TensorView view(DType dtype, std::initializer_list<int64_t> shape) const {
    return TensorView::contiguous(ptr_, dtype, shape, Device::kCuda);
  }
  T* data() const { return ptr_; }
  size_t size() const { return n_; }

 private:
  T* ptr_ = nullptr;
  size_t n_ = 0;
  cudaStream_t stream_ = nullptr;
};

using Bf16 = __nv_bfloat16;

inline std::vector<Bf16> to_bf16(const std::vector<float>& v) {
  std::vector<Bf16> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = __float2bfloat16_rn(v[i]);
  return out;
}

inline std::vector<float> from_bf16(const std::vector<Bf16>& v) {
  std::vector<float> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = __bfloat162float(v[i]);
  return out;
}

// Values rounded to bf16 (what the GPU sees), kept as floats for the reference.
inline std::vector<float> bf16_rounded(const std::vector<float>& v) { return from_bf16(to_bf16(v)); }

template <class T>
TensorView host_view(std::vector<T>& v, DType dtype, std::initializer_list<int64_t> shape) {
  return TensorView::contiguous(v.data(), dtype, shape, Device::kCpu);
}

// Bitwise equality with the first mismatch in the message ("what[index]: got vs want").
template <class T>
::testing::AssertionResult same_bits(const std::vector<T>& got, const std::vector<T>& want,
                                     const std::string& what) {
  if (got.size() != want.size())
    return ::testing::AssertionFailure() << what << ": " << got.size() << " vs " << want.size()
                                         << " elements";
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::memcmp(&got[i], &want[i], sizeof(T)) != 0)
      return ::testing::AssertionFailure() << what << "[" << i << "]: got " << +got[i]
                                           << ", want " << +want[i];
  }
  return ::testing::AssertionSuccess();
}

// Maps from the reference for T tokens routed to k distinct random experts of E, segments
// padded to `align`, and R = T·k + E·(align - 1) + 3 rows (a few past every offsets[E]).
struct RefMaps {
  int64_t R;
  std::vector<int32_t> row_of, token_of_row, offsets;
};
inline RefMaps make_ref_maps(int64_t T, int64_t E, int64_t k, int64_t align) {
  std::vector<int32_t> idx(T * k), perm(E), counts(E, 0), offsets(E + 1);
  std::iota(perm.begin(), perm.end(), 0);
  for (int64_t t = 0; t < T; ++t) {
    std::shuffle(perm.begin(), perm.end(), rng());
    std::copy(perm.begin(), perm.begin() + k, idx.begin() + t * k);
  }
  for (int32_t e : idx) ++counts[e];
  RefMaps m{.R = T * k + E * (align - 1) + 3};
  m.row_of.resize(T * k);
  m.token_of_row.resize(m.R);
  ref::expert_offsets(host_view(counts, DType::kInt32, {E}),
                      host_view(offsets, DType::kInt32, {E + 1}), align);
  ref::dispatch_maps(host_view(idx, DType::kInt32, {T, k}),
                     host_view(offsets, DType::kInt32, {E + 1}),
                     host_view(m.row_of, DType::kInt32, {T, k}),
                     host_view(m.token_of_row, DType::kInt32, {m.R}));
  m.offsets = offsets;
  return m;
}

}  // namespace moefuse::test
