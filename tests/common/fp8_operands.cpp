#include "common/fp8_operands.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>

#include "common/test_util.h"
#include "formats/fp8.h"
#include "moefuse/grouped_gemm_fp8.h"
#include "ref/quant.h"

namespace moefuse::test {

float bf16_to_float(uint16_t h) {
  const uint32_t u = uint32_t{h} << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

uint16_t float_to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return static_cast<uint16_t>((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
}

std::vector<float> fp8_exact_rows(int64_t m, int64_t h) {
  std::mt19937_64& gen = rng();
  std::uniform_int_distribution<int> code(0, 0xFD), exponent(-10, -7), place(0, 127);
  std::vector<float> x(m * h);
  for (int64_t r = 0; r < m; ++r)
    for (int64_t g0 = 0; g0 < h; g0 += 128) {
      const int64_t n = std::min<int64_t>(128, h - g0);
      const float s = std::ldexp(1.0f, exponent(gen));
      float* group = x.data() + r * h + g0;
      // Codes 0x00..0x7E and 0x80..0xFE: every finite E4M3 value of either sign (0x7F is NaN).
      for (int64_t i = 0; i < n; ++i) {
        const int c = code(gen);
        group[i] = formats::e4m3_to_float(static_cast<uint8_t>(c < 0x7F ? c : c + 1)) * s;
      }
      group[place(gen) % n] = (code(gen) % 2 ? -formats::kE4M3Max : formats::kE4M3Max) * s;
    }
  return x;
}

std::vector<float> widen(const std::vector<uint16_t>& bf16) {
  std::vector<float> out(bf16.size());
  for (size_t i = 0; i < bf16.size(); ++i) out[i] = bf16_to_float(bf16[i]);
  return out;
}

std::vector<int32_t> offsets_of(const std::vector<int>& counts, int base) {
  std::vector<int32_t> o(counts.size() + 1, base);
  for (size_t i = 0; i < counts.size(); ++i) o[i + 1] = o[i] + counts[i];
  return o;
}

std::vector<int> uniform_counts(int experts, int total) {
  std::vector<int> c(experts, 0);
  std::uniform_int_distribution<int> pick(0, experts - 1);
  for (int i = 0; i < total; ++i) ++c[pick(rng())];
  return c;
}

Fp8Weight::Fp8Weight(std::vector<float> w, int64_t e_, int64_t n_, int64_t k_)
    : e(e_), n(n_), k(k_), q(e * n * k), s(e * fp8_scale_groups(n) * fp8_scale_groups(k)) {
  ref::quantize_fp8_blockwise_128x128(host(w.data(), DType::kFloat32, {e, n, k}), codes(),
                                      scales());
}

TensorView Fp8Weight::scales() {
  return host(s.data(), DType::kFloat32, {e, fp8_scale_groups(n), fp8_scale_groups(k)});
}

Fp8Rows::Fp8Rows(std::vector<float> x, int64_t m_, int64_t k_)
    : m(m_), k(k_), q(m * k), s(fp8_scale_groups(k) * fp8_scale_rows(m)) {
  std::vector<float> rows(m * fp8_scale_groups(k));
  ref::quantize_fp8_blockwise_1x128(host(x.data(), DType::kFloat32, {m, k}), codes(),
                                    host(rows.data(), DType::kFloat32, {m, fp8_scale_groups(k)}));
  transpose_fp8_activation_scales(host(rows.data(), DType::kFloat32, {m, fp8_scale_groups(k)}),
                                  scales());
}

TensorView Fp8Rows::scales() {
  return host(s.data(), DType::kFloat32, {fp8_scale_groups(k), fp8_scale_rows(m)});
}

double Fp8Rows::deq(int64_t r, int64_t j) const {
  return double(formats::e4m3_to_float(q[r * k + j])) *
         s[(j / kFp8ScaleGroup) * fp8_scale_rows(m) + r];
}

void expect_rows_quantised_1x128(const std::vector<float>& values,
                                 const std::vector<uint8_t>& codes,
                                 const std::vector<float>& scales, int64_t m, int64_t n,
                                 int64_t first, int64_t end,
                                 const std::function<std::string(int64_t, int64_t)>& where) {
  const int64_t groups = fp8_scale_groups(n), pitch = fp8_scale_rows(m);
  std::vector<float> row(n), want_scales(groups);
  std::vector<uint8_t> want_codes(n);
  for (int64_t r = 0; r < m; ++r) {
    const uint8_t* got = codes.data() + r * n;
    if (r < first || r >= end) {
      ASSERT_TRUE(std::all_of(got, got + n, [](uint8_t b) { return b == 0xFF; }))
          << "codes of row " << r << " outside the experts were written";
      for (int64_t g = 0; g < groups; ++g)
        ASSERT_TRUE(std::isnan(scales[g * pitch + r]))
            << "scale [" << g << ", " << r << "] outside the experts was written";
      continue;
    }
    std::copy(values.begin() + r * n, values.begin() + (r + 1) * n, row.begin());
    ref::quantize_fp8_blockwise_1x128(host(row.data(), DType::kFloat32, {1, n}),
                                      host(want_codes.data(), DType::kFloat8E4M3, {1, n}),
                                      host(want_scales.data(), DType::kFloat32, {1, groups}));
    for (int64_t g = 0; g < groups; ++g) {
      const float s = scales[g * pitch + r];
      ASSERT_EQ(std::memcmp(&s, &want_scales[g], 4), 0)
          << "scale of " << where(r, g) << ": got " << s << ", want " << want_scales[g];
      for (int64_t i = g * kFp8ScaleGroup; i < std::min(n, (g + 1) * kFp8ScaleGroup); ++i)
        ASSERT_EQ(got[i], want_codes[i]) << "code of " << where(r, g) << " column " << i;
    }
  }
  for (int64_t g = 0; g < groups; ++g)  // the padding columns of the scale tensor
    for (int64_t r = m; r < pitch; ++r)
      ASSERT_TRUE(std::isnan(scales[g * pitch + r])) << "padding scale [" << g << ", " << r
                                                     << "] was written";
}

}  // namespace moefuse::test
