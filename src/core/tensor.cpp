#include "moefuse/tensor.h"

#include <cstdint>
#include <string>

#include "moefuse/error.h"

namespace moefuse {

TensorView TensorView::contiguous(void* data, DType dtype, std::initializer_list<int64_t> shape,
                                  Device device) {
  MOEFUSE_EXPECT(shape.size() <= kMaxRank, "shape", "rank <= 4", std::to_string(shape.size()));
  TensorView t;
  t.data = data;
  t.dtype = dtype;
  t.device = device;
  t.rank = static_cast<int>(shape.size());
  int i = 0;
  for (int64_t extent : shape) {
    MOEFUSE_EXPECT(extent >= 0, "shape", "non-negative extents", std::to_string(extent));
    t.shape[i++] = extent;
  }
  int64_t stride = 1;
  for (int d = t.rank - 1; d >= 0; --d) {
    t.strides[d] = stride;
    stride *= t.shape[d];
  }
  return t;
}

int64_t TensorView::numel() const {
  int64_t n = 1;
  for (int d = 0; d < rank; ++d) n *= shape[d];
  return n;
}

bool TensorView::is_contiguous() const {
  int64_t expected = 1;
  for (int d = rank - 1; d >= 0; --d) {
    if (shape[d] != 1 && strides[d] != expected) return false;
    expected *= shape[d];
  }
  return true;
}

std::string shape_string(const TensorView& t) {
  std::string s = "[";
  for (int d = 0; d < t.rank; ++d) {
    if (d) s += ", ";
    s += std::to_string(t.shape[d]);
  }
  return s + "]";
}

void expect_tensor(const TensorView& t, std::string_view name, DType dtype, Device device,
                   std::initializer_list<int64_t> shape) {
  std::string expected_shape = "[";
  bool shape_ok = t.rank == static_cast<int>(shape.size());
  int d = 0;
  for (int64_t extent : shape) {
    if (d) expected_shape += ", ";
    expected_shape += extent == kAnyExtent ? std::string("*") : std::to_string(extent);
    if (shape_ok && extent != kAnyExtent && t.shape[d] != extent) shape_ok = false;
    ++d;
  }
  expected_shape += "]";
  MOEFUSE_EXPECT(t.dtype == dtype, name, "dtype " + std::string(dtype_name(dtype)),
                 "dtype " + std::string(dtype_name(t.dtype)));
  MOEFUSE_EXPECT(t.device == device, name, "device " + std::string(device_name(device)),
                 "device " + std::string(device_name(t.device)));
  MOEFUSE_EXPECT(shape_ok, name, "shape " + expected_shape, "shape " + shape_string(t));
  MOEFUSE_EXPECT(t.is_contiguous(), name, "a contiguous tensor", "strides that are not row-major");
  MOEFUSE_EXPECT(t.data != nullptr || t.numel() == 0, name, "a non-null data pointer",
                 "nullptr with " + std::to_string(t.numel()) + " elements");
}

void expect_aligned(const TensorView& t, std::string_view name, size_t bytes) {
  const size_t misaligned = reinterpret_cast<uintptr_t>(t.data) % bytes;
  MOEFUSE_EXPECT(misaligned == 0, name,
                 "a " + std::to_string(bytes) + "-byte aligned data pointer",
                 "a pointer misaligned by " + std::to_string(misaligned) + " bytes");
}

int64_t byte_span(const TensorView& t) {
  if (t.data == nullptr || t.numel() == 0) return 0;
  int64_t last = 0;  // offset of the last element, in elements
  for (int d = 0; d < t.rank; ++d) last += (t.shape[d] - 1) * t.strides[d];
  return ((last + 1) * dtype_bits(t.dtype) + 7) / 8;
}

void expect_disjoint(const TensorView& a, std::string_view name_a, const TensorView& b,
                     std::string_view name_b) {
  const int64_t a_bytes = byte_span(a), b_bytes = byte_span(b);
  const auto pa = reinterpret_cast<uintptr_t>(a.data), pb = reinterpret_cast<uintptr_t>(b.data);
  const bool overlap = a_bytes > 0 && b_bytes > 0 && pa < pb + static_cast<uintptr_t>(b_bytes) &&
                       pb < pa + static_cast<uintptr_t>(a_bytes);
  MOEFUSE_EXPECT(!overlap, name_a, "memory not overlapping " + std::string(name_b),
                 std::to_string(a_bytes) + " bytes at offset " +
                     std::to_string(static_cast<int64_t>(pa - pb)) + " from " +
                     std::string(name_b) + "'s " + std::to_string(b_bytes));
}

void expect_outputs_disjoint(std::span<const NamedView> outputs, std::span<const NamedView> inputs) {
  for (size_t o = 0; o < outputs.size(); ++o) {
    for (size_t p = o + 1; p < outputs.size(); ++p)
      expect_disjoint(outputs[o].view, outputs[o].name, outputs[p].view, outputs[p].name);
    for (const NamedView& i : inputs)
      expect_disjoint(outputs[o].view, outputs[o].name, i.view, i.name);
  }
}

}  // namespace moefuse
