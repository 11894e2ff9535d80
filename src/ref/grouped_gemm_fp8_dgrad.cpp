#include "ref/grouped_gemm_fp8_dgrad.h"

#include <cstdint>
#include <vector>

#include "moefuse/grouped_gemm.h"
#include "ref/bf16_bits.h"
#include "ref/check.h"
#include "ref/fc2_dgrad_epilogue.h"
#include "ref/grouped_gemm_fp8.h"

namespace moefuse::ref {
void transpose_fp8_blockwise_weights(const TensorView& w, const TensorView& w_scales,
                                     const TensorView& wt, const TensorView& wt_scales) {
  validate_transpose_fp8_blockwise_weights(w, w_scales, wt, wt_scales, Device::kCpu);
  const int64_t e_count = w.size(0), n = w.size(1), k = w.size(2);
  const int64_t ng = fp8_scale_groups(n), kg = fp8_scale_groups(k);
  const uint8_t* src = w.as<const uint8_t>();
  uint8_t* dst = wt.as<uint8_t>();
  const float* s = w_scales.as<const float>();
  float* st = wt_scales.as<float>();
  for (int64_t e = 0; e < e_count; ++e) {
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < k; ++j) dst[(e * k + j) * n + i] = src[(e * n + i) * k + j];
    for (int64_t i = 0; i < ng; ++i)
      for (int64_t j = 0; j < kg; ++j) st[(e * kg + j) * ng + i] = s[(e * ng + i) * kg + j];
  }
}

void fc2_dgrad_fp8(const Fc2DgradFp8Args& args) {
  validate_fc2_dgrad_fp8(args, Device::kCpu);
  const int64_t num_experts = args.w2t.size(0), f = args.w2t.size(1);
  const int64_t m = args.dys.size(0);
  expect_offsets(args.offsets, "offsets", num_experts, m);

  // g through the FP8 GEMM reference (kLinear, fp32 out), then rounded to bf16: the kernel's
  // consumers stage g as bf16 for the epilogue warps' dGLU (cuda/gemm/fp8/dglu_handoff.cuh).
  std::vector<float> g(static_cast<size_t>(m * f), 0.0f);
  grouped_gemm_fp8({.a = args.dys,
                    .a_scales = args.dys_scales,
                    .b = args.w2t,
                    .b_scales = args.w2t_scales,
                    .offsets = args.offsets,
                    .d = TensorView::contiguous(g.data(), DType::kFloat32, {m, f}),
                    .epilogue = GemmEpilogue::kLinear,
                    .row_scale = {},
                    .bias = {},
                    .pre_activation = {}});
  for (float& v : g) v = bf16_value(bf16_bits(v));

  fc2_dgrad_epilogue({.dys = args.dys_bf16,
                      .w2 = {},
                      .offsets = args.offsets,
                      .pre = args.pre,
                      .d_pre = args.d_pre,
                      .activation = args.activation,
                      .clamped_swiglu = args.clamped_swiglu,
                      .row_scale = args.row_scale,
                      .scaled_act = args.scaled_act,
                      .d_row_scale = args.d_row_scale,
                      .b2 = args.b2,
                      .d_b2 = {}},
                     g.data());
}

}  // namespace moefuse::ref
