#include "cuda/quant/validate.h"

#include <cstdint>
#include <string>

#include "moefuse/error.h"

namespace moefuse::cuda::quant {
namespace {

constexpr int64_t kVec = 16;
constexpr int64_t kEdge = 128;

void expect_row_multiple(int64_t k, std::string_view name) {
  MOEFUSE_EXPECT(k % kVec == 0, name, "a last extent (K) that is a multiple of 16",
                 "K = " + std::to_string(k));
}

void expect_input_dtype(const TensorView& t, std::string_view name) {
  MOEFUSE_EXPECT(t.dtype == DType::kBFloat16 || t.dtype == DType::kFloat32, name,
                 "dtype bf16 or fp32", "dtype " + std::string(dtype_name(t.dtype)));
}

}  // namespace

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

void expect_device_tensor(const TensorView& t, std::string_view name, DType dtype,
                          std::initializer_list<int64_t> shape) {
  expect_tensor(t, name, dtype, Device::kCuda, shape);
  expect_aligned(t, name);
}

std::pair<int64_t, int64_t> expect_input_matrix(const TensorView& t, std::string_view name) {
  expect_input_dtype(t, name);
  return expect_code_matrix(t, name, t.dtype);
}

std::pair<int64_t, int64_t> expect_code_matrix(const TensorView& t, std::string_view name,
                                               DType dtype) {
  expect_device_tensor(t, name, dtype, {kAnyExtent, kAnyExtent});
  expect_row_multiple(t.size(1), name);
  return {t.size(0), t.size(1)};
}

WeightExtents expect_weights(const TensorView& t, std::string_view name, DType dtype,
                             bool any_input_dtype) {
  MOEFUSE_EXPECT(t.rank == 2 || t.rank == 3, name, "rank 2 [N, K] or rank 3 [E, N, K]",
                 "shape " + shape_string(t));
  if (any_input_dtype) {
    expect_input_dtype(t, name);
    dtype = t.dtype;
  }
  if (t.rank == 2) {
    expect_device_tensor(t, name, dtype, {kAnyExtent, kAnyExtent});
    expect_row_multiple(t.size(1), name);
    return {1, t.size(0), t.size(1)};
  }
  expect_device_tensor(t, name, dtype, {kAnyExtent, kAnyExtent, kAnyExtent});
  expect_row_multiple(t.size(2), name);
  return {t.size(0), t.size(1), t.size(2)};
}

void expect_like_weights(const TensorView& t, std::string_view name, DType dtype, int rank,
                         const WeightExtents& w) {
  if (rank == 2)
    expect_device_tensor(t, name, dtype, {w.rows, w.cols});
  else
    expect_device_tensor(t, name, dtype, {w.experts, w.rows, w.cols});
}

void expect_weight_scales(const TensorView& t, int rank, const WeightExtents& w) {
  const int64_t bn = ceil_div(w.rows, kEdge), bk = ceil_div(w.cols, kEdge);
  if (rank == 2)
    expect_tensor(t, "scales", DType::kFloat32, Device::kCuda, {bn, bk});
  else
    expect_tensor(t, "scales", DType::kFloat32, Device::kCuda, {w.experts, bn, bk});
}

}  // namespace moefuse::cuda::quant
