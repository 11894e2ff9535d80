#include "ref/grouped_gemm_fp8_wgrad.h"

#include <algorithm>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "formats/recipes.h"
#include "moefuse/error.h"
#include "ref/bf16_bits.h"
#include "ref/check.h"

namespace moefuse::ref {
namespace {

constexpr int64_t kGroup = kFp8ScaleGroup;

// Expert e's rows and its first group (the exclusive running sum of ceil(m / 128)).
struct ExpertGroups {
  int64_t first_row, rows, first_group;
};

std::vector<ExpertGroups> expert_groups(const TensorView& offsets) {
  const int64_t experts = offsets.size(0) - 1;
  const int32_t* o = offsets.as<const int32_t>();
  std::vector<ExpertGroups> out(experts);
  int64_t next = 0;
  for (int64_t e = 0; e < experts; ++e) {
    const int64_t rows = o[e + 1] - o[e];
    out[e] = {.first_row = o[e], .rows = rows, .first_group = next};
    next += (rows + kGroup - 1) / kGroup;
  }
  return out;
}

int64_t total_groups(const std::vector<ExpertGroups>& g) {
  if (g.empty()) return 0;
  return g.back().first_group + (g.back().rows + kGroup - 1) / kGroup;
}

// deq(t)[n, c] for a column-wise operand t [N, 128 G] with scales [G, N].
double dequantized(const TensorView& t, const TensorView& scales, int64_t n, int64_t c) {
  const int64_t cols = t.size(1), width = t.size(0);
  return double(formats::e4m3_to_float(t.as<const uint8_t>()[n * cols + c])) *
         double(scales.as<const float>()[(c / kGroup) * width + n]);
}

}  // namespace

void quantize_fp8_colwise_grouped(const TensorView& x, const TensorView& offsets,
                                  const TensorView& xt, const TensorView& scales) {
  validate_quantize_fp8_colwise_grouped(x, offsets, xt, scales, Device::kCpu, DType::kFloat32);
  const int64_t m_cap = x.size(0), n = x.size(1), cols = xt.size(1);
  expect_offsets(offsets, "offsets", offsets.size(0) - 1, m_cap);
  const float* in = x.as<const float>();
  uint8_t* q = xt.as<uint8_t>();
  float* sc = scales.as<float>();
  for (const ExpertGroups& eg : expert_groups(offsets)) {
    for (int64_t g = 0; g * kGroup < eg.rows; ++g) {
      const int64_t global = eg.first_group + g;
      const int64_t r0 = eg.first_row + g * kGroup, rows = std::min(kGroup, eg.rows - g * kGroup);
      for (int64_t j = 0; j < n; ++j) {
        uint32_t amax = 0;
        for (int64_t i = 0; i < rows; ++i)
          amax = formats::max_bits(amax, formats::amax_bits(in[(r0 + i) * n + j]));
        const formats::BlockwiseScale s = formats::blockwise_scale(formats::bits_float(amax));
        sc[global * n + j] = s.scale;
        uint8_t* out = q + j * cols + global * kGroup;
        for (int64_t i = 0; i < kGroup; ++i)
          out[i] = i < rows ? formats::e4m3_from_float(in[(r0 + i) * n + j] * s.multiplier) : 0;
      }
    }
  }
}

void grouped_gemm_fp8_wgrad(const GroupedGemmFp8WgradArgs& args) {
  validate_grouped_gemm_fp8_wgrad(args, Device::kCpu);
  const int64_t experts = args.offsets.size(0) - 1, groups = args.at.size(1) / kGroup;
  expect_offsets(args.offsets, "offsets", experts, std::numeric_limits<int32_t>::max());
  const std::vector<ExpertGroups> eg = expert_groups(args.offsets);
  MOEFUSE_EXPECT(total_groups(eg) <= groups, "offsets",
                 "at most " + std::to_string(groups) + " groups of 128 rows (the operands' capacity)",
                 std::to_string(total_groups(eg)));
  const int64_t n_a = args.at.size(0), n_b = args.bt.size(0);
  // D[e][i, j] = v (+ the old value with accumulate, fp32 only), rounded once to d's dtype.
  auto store = [&](int64_t at, double v) {
    if (args.d.dtype == DType::kBFloat16) {
      args.d.as<uint16_t>()[at] = bf16_bits(static_cast<float>(v));
      return;
    }
    float& out = args.d.as<float>()[at];
    out = static_cast<float>(args.accumulate ? double(out) + v : v);
  };
  std::vector<double> sum(n_b);
  for (int64_t e = 0; e < experts; ++e) {
    const int64_t de = e * n_a * n_b;
    if (eg[e].rows == 0) {
      if (!args.accumulate)
        for (int64_t i = 0; i < n_a * n_b; ++i) store(de + i, 0.0);
      continue;
    }
    // Columns of expert e: its groups' first `rows` columns (the rest is padding).
    std::vector<int64_t> columns;
    for (int64_t r = 0; r < eg[e].rows; ++r)
      columns.push_back((eg[e].first_group + r / kGroup) * kGroup + r % kGroup);
    // deq(bt) of the expert's columns, [column][j], so the inner loop runs contiguously.
    std::vector<double> b(columns.size() * n_b);
    for (size_t c = 0; c < columns.size(); ++c)
      for (int64_t j = 0; j < n_b; ++j)
        b[c * n_b + j] = dequantized(args.bt, args.b_scales, j, columns[c]);
    for (int64_t i = 0; i < n_a; ++i) {
      std::fill(sum.begin(), sum.end(), 0.0);
      for (size_t c = 0; c < columns.size(); ++c) {
        const double a = dequantized(args.at, args.a_scales, i, columns[c]);
        for (int64_t j = 0; j < n_b; ++j) sum[j] += a * b[c * n_b + j];
      }
      for (int64_t j = 0; j < n_b; ++j) store(de + i * n_b + j, sum[j]);
    }
  }
}

}  // namespace moefuse::ref
