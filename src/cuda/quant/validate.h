// Argument checks of the GPU quantisation API (moefuse/quant.h): device tensors, 16-byte-aligned
// data, rows a multiple of 16 elements (the kernels move 16 elements per thread).
#pragma once

#include <cstdint>
#include <initializer_list>
#include <string_view>
#include <utility>

#include "moefuse/tensor.h"

namespace moefuse::cuda::quant {

int64_t ceil_div(int64_t a, int64_t b);

// A device tensor of `dtype` and `shape` whose data is 16-byte aligned.
void expect_device_tensor(const TensorView& t, std::string_view name, DType dtype,
                          std::initializer_list<int64_t> shape);

// A bf16 or fp32 device matrix [M, K], 16-byte aligned, K % 16 == 0; returns {M, K}.
std::pair<int64_t, int64_t> expect_input_matrix(const TensorView& t, std::string_view name);

// A device matrix [M, K] of `dtype`, 16-byte aligned, K % 16 == 0; returns {M, K}.
std::pair<int64_t, int64_t> expect_code_matrix(const TensorView& t, std::string_view name,
                                               DType dtype);

// Weights [N, K] or [E, N, K] of `dtype` (kAny: bf16 or fp32), aligned, K % 16 == 0.
struct WeightExtents {
  int64_t experts, rows, cols;
};
WeightExtents expect_weights(const TensorView& t, std::string_view name, DType dtype,
                             bool any_input_dtype);
// `t` with the same rank and extents as the weights.
void expect_like_weights(const TensorView& t, std::string_view name, DType dtype, int rank,
                         const WeightExtents& w);
// [ceil(N/128), ceil(K/128)] or [E, ...] fp32 scales for weights of `rank`.
void expect_weight_scales(const TensorView& t, int rank, const WeightExtents& w);

}  // namespace moefuse::cuda::quant
