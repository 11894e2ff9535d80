#include "ref/grouped_gemm_fp8_dgrad.h"

#include <cmath>
#include <cstdint>
#include <vector>

#include "moefuse/grouped_gemm.h"
#include "ref/bf16_bits.h"
#include "ref/check.h"
#include "ref/expert_mlp.h"
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
  const int64_t num_experts = args.w2t.size(0), f = args.w2t.size(1), h = args.w2t.size(2);
  const int64_t m = args.dys.size(0);
  expect_offsets(args.offsets, "offsets", num_experts, m);
  const bool glu = is_glu(args.activation);
  const int64_t fc1 = glu ? 2 * f : f;

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

  const MoeConfig config{.hidden = h, .ffn = f, .num_experts = num_experts, .top_k = 1,
                         .activation = args.activation, .clamped_swiglu = args.clamped_swiglu};
  const int32_t* off = args.offsets.as<const int32_t>();
  const uint16_t* pre_bits = args.pre.as<const uint16_t>();
  std::vector<double> pre(fc1), act(f), d_act(f), d_pre(fc1);
  for (int64_t e = 0; e < num_experts; ++e) {
    for (int64_t r = off[e]; r < off[e + 1]; ++r) {
      // The kernel's interleaved columns to the reference [gate; up] order and back.
      auto col = [&](int64_t i) { return glu ? glu_interleaved_row(i, f) : i; };
      for (int64_t i = 0; i < fc1; ++i) pre[i] = bf16_value(pre_bits[r * fc1 + col(i)]);
      const double p = is_absent(args.row_scale) ? 1.0 : args.row_scale.as<const float>()[r];
      activation_forward(config, pre.data(), act.data());
      double dp = 0;
      for (int64_t i = 0; i < f; ++i) {
        const double gi = g[r * f + i];
        d_act[i] = p * gi;
        dp += gi * act[i];
      }
      activation_backward(config, pre.data(), d_act.data(), d_pre.data());
      for (int64_t i = 0; i < fc1; ++i)
        args.d_pre.as<uint16_t>()[r * fc1 + col(i)] = bf16_bits(d_pre[i]);
      if (!is_absent(args.scaled_act))
        for (int64_t i = 0; i < f; ++i)
          args.scaled_act.as<uint16_t>()[r * f + i] = bf16_bits(p * act[i]);
      if (is_absent(args.d_row_scale)) continue;
      if (!is_absent(args.b2))
        for (int64_t i = 0; i < h; ++i)
          dp += bf16_value(args.dys_bf16.as<const uint16_t>()[r * h + i]) *
                double(args.b2.as<const float>()[e * h + i]);
      args.d_row_scale.as<float>()[r] = static_cast<float>(dp);
    }
  }
}

}  // namespace moefuse::ref
