// A non-owning view of a strided tensor in host or device memory.
//
// moefuse never allocates or frees through a view: the caller owns every buffer. Strides are in
// elements (for kFloat4E2M1, in elements of the packed storage: two per byte).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <span>
#include <string>
#include <string_view>

#include "moefuse/dtype.h"

namespace moefuse {

enum class Device : uint8_t { kCpu, kCuda };

constexpr std::string_view device_name(Device d) { return d == Device::kCpu ? "cpu" : "cuda"; }

struct TensorView {
  static constexpr int kMaxRank = 4;

  void* data = nullptr;
  DType dtype = DType::kFloat32;
  Device device = Device::kCpu;
  int rank = 0;
  std::array<int64_t, kMaxRank> shape{};
  std::array<int64_t, kMaxRank> strides{};

  // A contiguous (row-major) view. Throws InvalidArgument on a negative extent or rank > 4.
  static TensorView contiguous(void* data, DType dtype, std::initializer_list<int64_t> shape,
                               Device device = Device::kCpu);

  int64_t size(int dim) const { return shape[dim]; }
  int64_t stride(int dim) const { return strides[dim]; }
  int64_t numel() const;
  bool is_contiguous() const;
  bool empty() const { return numel() == 0; }

  template <class T>
  T* as() const { return static_cast<T*>(data); }
};

// "[16, 2048]"
std::string shape_string(const TensorView& t);

// Wildcard extent for expect_tensor: any size accepted in that dimension.
inline constexpr int64_t kAnyExtent = -1;

// Validates `t` (named `name` in the error): dtype, device, exact rank and extents (kAnyExtent
// matches any), contiguity, and a non-null pointer whenever the tensor is not empty.
void expect_tensor(const TensorView& t, std::string_view name, DType dtype, Device device,
                   std::initializer_list<int64_t> shape);

// An optional argument is absent when it holds no data: the default view (rank 0) or a view
// with no elements and a null pointer.
inline bool is_absent(const TensorView& t) {
  return t.data == nullptr && (t.rank == 0 || t.numel() == 0);
}

// Throws InvalidArgument (named `name`) unless t.data is a multiple of `bytes` (TMA descriptors and
// 16-byte vector accesses need 16).
void expect_aligned(const TensorView& t, std::string_view name, size_t bytes = 16);

// Bytes from t.data to one past t's last element (strides included); 0 when t is empty or null.
int64_t byte_span(const TensorView& t);

// Throws InvalidArgument (named `name_a`, naming `name_b` in the expectation) when the byte ranges
// of `a` and `b` overlap. An empty view overlaps nothing. Kernels read inputs and write outputs
// from different CTAs in no fixed order, so an output aliasing another argument is undefined.
void expect_disjoint(const TensorView& a, std::string_view name_a, const TensorView& b,
                     std::string_view name_b);

struct NamedView {
  TensorView view;
  std::string_view name;
};

// expect_disjoint for each output against every later output and every input.
void expect_outputs_disjoint(std::span<const NamedView> outputs, std::span<const NamedView> inputs);

}  // namespace moefuse
