// Host-side pieces shared by the FP8 GEMM tests (CPU reference tests and GPU kernel tests):
// views over host memory, bf16 bit conversions, expert offsets, and operands quantised by the
// quant reference (bit-identical to the GPU quantisers) in the layouts the FP8 GEMMs read.
#pragma once

#include <cstdint>
#include <functional>
#include <initializer_list>
#include <string>
#include <vector>

#include "moefuse/tensor.h"

namespace moefuse::test {

inline TensorView host(void* p, DType dtype, std::initializer_list<int64_t> shape) {
  return TensorView::contiguous(p, dtype, shape);
}

float bf16_to_float(uint16_t h);
uint16_t float_to_bf16(float f);  // round to nearest even; inputs are finite
std::vector<float> widen(const std::vector<uint16_t>& bf16);

// offsets[0] = base, offsets[e + 1] = offsets[e] + counts[e].
std::vector<int32_t> offsets_of(const std::vector<int>& counts, int base);
// `total` rows spread over `experts` uniformly at random.
std::vector<int> uniform_counts(int experts, int total);

// Rows [M, H] that the 1x128 FP8 quantiser represents exactly (the FP8 dispatch's lossless case):
// in each 128-group one element is ±448·s and the others E4M3 values times s, s a power of two
// in [2^-10, 2^-7] per group (so |x| <= 3.5), so the scale is s, every code exact, and
// dequantising gives the rows back bit for bit (and bf16 holds them: E4M3 values have four
// significant bits).
std::vector<float> fp8_exact_rows(int64_t m, int64_t h);

// A weight [E, N, K] quantised 128x128 (scales [E, ceil(N/128), ceil(K/128)]).
struct Fp8Weight {
  int64_t e, n, k;
  std::vector<uint8_t> q;
  std::vector<float> s;
  Fp8Weight(std::vector<float> w, int64_t e, int64_t n, int64_t k);
  TensorView codes() { return host(q.data(), DType::kFloat8E4M3, {e, n, k}); }
  TensorView scales();
};

// Rows [M, K] quantised 1x128, scales transposed to the K-major layout the kernels read
// ([ceil(K/128), fp8_scale_rows(M)]).
struct Fp8Rows {
  int64_t m, k;
  std::vector<uint8_t> q;
  std::vector<float> s;
  Fp8Rows(std::vector<float> x, int64_t m, int64_t k);
  TensorView codes() { return host(q.data(), DType::kFloat8E4M3, {m, k}); }
  TensorView scales();
  double deq(int64_t r, int64_t j) const;  // the dequantised value of row r, column j
};

// An FP8 activation operand as the kernels emit it from an epilogue (the FP8 GEMM's E4M3 D):
// codes [m, n] e4m3 and scales [ceil(n/128), fp8_scale_rows(m)] fp32, K-major, against the 1x128
// reference quantiser of `values` [m, n] (bf16 values widened) row by row, bit for bit, on rows
// [first, end); other rows keep their poison (codes 0xFF, scales NaN), as do the scales' padding
// columns. `where(r, g)` names row r and group g in a failure message.
void expect_rows_quantised_1x128(const std::vector<float>& values,
                                 const std::vector<uint8_t>& codes,
                                 const std::vector<float>& scales, int64_t m, int64_t n,
                                 int64_t first, int64_t end,
                                 const std::function<std::string(int64_t, int64_t)>& where);

}  // namespace moefuse::test
