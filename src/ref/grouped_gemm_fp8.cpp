#include "ref/grouped_gemm_fp8.h"

#include <cmath>
#include <cstdint>
#include <vector>

#include "formats/fp8.h"
#include "formats/ue8m0.h"
#include "ref/bf16_bits.h"
#include "ref/check.h"
#include "ref/expert_mlp.h"
#include "ref/quant.h"

namespace moefuse::ref {
namespace {

// The dequantised operands of one expert: b as [N, K] and a as [rows, K], fp64.
std::vector<double> dequantize_b(const GroupedGemmFp8Args& args, int64_t e) {
  const int64_t n = args.b.size(1), k = args.b.size(2);
  const uint8_t* q = args.b.as<const uint8_t>() + e * n * k;
  std::vector<double> out(n * k);
  if (args.recipe == Fp8Recipe::kMxfp8) {  // [E, K/32, N] e8m0
    const uint8_t* s = args.b_scales.as<const uint8_t>() + e * (k / kMxfp8ScaleGroup) * n;
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < k; ++j)
        out[i * k + j] = double(formats::e4m3_to_float(q[i * k + j])) *
                         double(formats::ue8m0_to_float(s[(j / kMxfp8ScaleGroup) * n + i]));
    return out;
  }
  const int64_t ng = fp8_scale_groups(n), kg = fp8_scale_groups(k);
  const float* s = args.b_scales.as<const float>() + e * ng * kg;
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < k; ++j)
      out[i * k + j] = double(formats::e4m3_to_float(q[i * k + j])) *
                       double(s[(i / kFp8ScaleGroup) * kg + j / kFp8ScaleGroup]);
  return out;
}

std::vector<double> dequantize_a_row(const GroupedGemmFp8Args& args, int64_t r) {
  const int64_t k = args.a.size(1), pitch = args.a_scales.size(1);
  const uint8_t* q = args.a.as<const uint8_t>() + r * k;
  std::vector<double> out(k);
  if (args.recipe == Fp8Recipe::kMxfp8) {  // [K/32, mxfp8_scale_rows(M_cap)] e8m0
    const uint8_t* s = args.a_scales.as<const uint8_t>();
    for (int64_t j = 0; j < k; ++j)
      out[j] = double(formats::e4m3_to_float(q[j])) *
               double(formats::ue8m0_to_float(s[(j / kMxfp8ScaleGroup) * pitch + r]));
    return out;
  }
  const float* s = args.a_scales.as<const float>();
  for (int64_t j = 0; j < k; ++j)
    out[j] = double(formats::e4m3_to_float(q[j])) * double(s[(j / kFp8ScaleGroup) * pitch + r]);
  return out;
}

}  // namespace

void grouped_gemm_fp8(const GroupedGemmFp8Args& args) {
  validate_grouped_gemm_fp8(args, Device::kCpu);
  const int64_t num_experts = args.b.size(0), n = args.b.size(1), k = args.b.size(2);
  const int64_t m_cap = args.a.size(0), n_out = args.d.size(1);
  expect_offsets(args.offsets, "offsets", num_experts, m_cap);
  const bool activation = args.epilogue == GemmEpilogue::kActivation;
  const bool glu = activation && is_glu(args.activation);
  const MoeConfig config{.hidden = k, .ffn = n_out, .num_experts = num_experts, .top_k = 1,
                         .activation = args.activation, .clamped_swiglu = args.clamped_swiglu};
  const int32_t* off = args.offsets.as<const int32_t>();
  const bool fp32_out = args.d.dtype == DType::kFloat32;
  const bool e4m3_out = args.d.dtype == DType::kFloat8E4M3;
  const int64_t groups = fp8_scale_groups(n_out);
  std::vector<double> h(n), pre(n), out(n_out);
  std::vector<float> rounded(n_out), row_scales(groups);  // e4m3 d: the bf16 D row, its scales
  for (int64_t e = 0; e < num_experts; ++e) {
    if (off[e + 1] <= off[e]) continue;
    const std::vector<double> b = dequantize_b(args, e);
    for (int64_t r = off[e]; r < off[e + 1]; ++r) {
      const std::vector<double> a = dequantize_a_row(args, r);
      for (int64_t i = 0; i < n; ++i) {
        double sum = 0;
        for (int64_t j = 0; j < k; ++j) sum += a[j] * b[i * k + j];
        h[i] = is_absent(args.bias) ? sum : sum + double(args.bias.as<const float>()[e * n + i]);
      }
      if (!fp32_out && activation)
        for (int64_t i = 0; i < n; ++i) h[i] = bf16_value(bf16_bits(h[i]));
      if (!is_absent(args.pre_activation)) {  // h + bias in the kernel's (interleaved) order
        uint16_t* pre_out = args.pre_activation.as<uint16_t>() + r * n;
        for (int64_t i = 0; i < n; ++i) pre_out[i] = bf16_bits(h[i]);
      }
      if (activation) {
        // The kernel's interleaved columns back to the reference [gate; up] order.
        for (int64_t i = 0; i < n; ++i) pre[i] = glu ? h[glu_interleaved_row(i, n_out)] : h[i];
        activation_forward(config, pre.data(), out.data());
      } else {
        out = h;
      }
      const double scale = is_absent(args.row_scale) ? 1.0 : args.row_scale.as<const float>()[r];
      for (int64_t i = 0; i < n_out; ++i) {
        const double v = out[i] * scale;
        if (fp32_out) args.d.as<float>()[r * n_out + i] = static_cast<float>(v);
        else if (e4m3_out) rounded[i] = bf16_value(bf16_bits(v));
        else args.d.as<uint16_t>()[r * n_out + i] = bf16_bits(v);
      }
      if (e4m3_out) {  // the bf16 row, quantised by the 1x128 reference; scales K-major
        uint8_t* codes = args.d.as<uint8_t>() + r * n_out;
        quantize_fp8_blockwise_1x128(
            TensorView::contiguous(rounded.data(), DType::kFloat32, {1, n_out}),
            TensorView::contiguous(codes, DType::kFloat8E4M3, {1, n_out}),
            TensorView::contiguous(row_scales.data(), DType::kFloat32, {1, groups}));
        for (int64_t g = 0; g < groups; ++g)
          args.d_scales.as<float>()[g * args.d_scales.size(1) + r] = row_scales[g];
      }
    }
  }
}

}  // namespace moefuse::ref
