// The one matrix product of the reference: fp32 or fp64 operands, fp64 accumulation. Operands are
// strided so that a transpose is only a swap of strides, never a copy.
#pragma once

#include <cstdint>

namespace moefuse::ref {

// Element (i, j) of a matrix at data[i * row_stride + j * col_stride].
template <class T>
struct Mat {
  const T* data;
  int64_t row_stride, col_stride;

  double operator()(int64_t i, int64_t j) const {
    return static_cast<double>(data[i * row_stride + j * col_stride]);
  }
  Mat transposed() const { return {data, col_stride, row_stride}; }
};

// A row-major [rows, cols] matrix and its transpose.
template <class T>
Mat<T> rows_of(const T* data, int64_t cols) { return {data, cols, 1}; }

// c[m * N + n] = (accumulate ? c : 0) + sum_k a(m, k) * b(k, n).
template <class TA, class TB>
void matmul(int64_t M, int64_t N, int64_t K, Mat<TA> a, Mat<TB> b, double* c, bool accumulate) {
  for (int64_t m = 0; m < M; ++m) {
    for (int64_t n = 0; n < N; ++n) {
      double sum = accumulate ? c[m * N + n] : 0.0;
      for (int64_t k = 0; k < K; ++k) sum += a(m, k) * b(k, n);
      c[m * N + n] = sum;
    }
  }
}

}  // namespace moefuse::ref
