#include "ref/layer_fp8.h"

#include <cstdint>
#include <vector>

#include "moefuse/grouped_gemm.h"
#include "moefuse/grouped_gemm_fp8.h"
#include "moefuse/grouped_gemm_fp8_dgrad.h"
#include "moefuse/grouped_gemm_fp8_wgrad.h"
#include "ref/grouped_gemm_fp8.h"
#include "ref/grouped_gemm_fp8_dgrad.h"
#include "ref/grouped_gemm_fp8_wgrad.h"
#include "ref/layer_parts.h"
#include "ref/quant.h"

namespace moefuse::ref {
namespace {

// An activation operand [rows, K]: e4m3 codes and K-major 1x128 scales, as the GEMM reads them.
struct Fp8Rows {
  std::vector<uint8_t> q;
  std::vector<float> scales;  // [ceil(K/128), fp8_scale_rows(rows)]

  Fp8Rows(std::vector<float> x, int64_t rows, int64_t k)
      : q(static_cast<size_t>(rows * k)),
        scales(static_cast<size_t>(fp8_scale_groups(k) * fp8_scale_rows(rows))) {
    std::vector<float> row_major(static_cast<size_t>(rows * fp8_scale_groups(k)));
    quantize_fp8_blockwise_1x128(host(x.data(), DType::kFloat32, {rows, k}),
                                 host(q.data(), DType::kFloat8E4M3, {rows, k}),
                                 host(row_major.data(), DType::kFloat32,
                                      {rows, fp8_scale_groups(k)}));
    transpose_fp8_activation_scales(
        host(row_major.data(), DType::kFloat32, {rows, fp8_scale_groups(k)}),
        host(scales.data(), DType::kFloat32, {fp8_scale_groups(k), fp8_scale_rows(rows)}));
  }
};

// A stacked weight [E, N, K]: e4m3 codes and 128x128 block scales.
struct Fp8Weight {
  std::vector<uint8_t> q;
  std::vector<float> scales;  // [E, ceil(N/128), ceil(K/128)]

  Fp8Weight(std::vector<float> w, int64_t e, int64_t n, int64_t k)
      : q(static_cast<size_t>(e * n * k)),
        scales(static_cast<size_t>(e * fp8_scale_groups(n) * fp8_scale_groups(k))) {
    quantize_fp8_blockwise_128x128(
        host(w.data(), DType::kFloat32, {e, n, k}), host(q.data(), DType::kFloat8E4M3, {e, n, k}),
        host(scales.data(), DType::kFloat32, {e, fp8_scale_groups(n), fp8_scale_groups(k)}));
  }
  Fp8Weight() = default;

  // [E, K, N]: the byte transpose the dgrads read (the same 128x128 blocks).
  Fp8Weight transposed(int64_t e, int64_t n, int64_t k) const {
    Fp8Weight t;
    t.q.resize(q.size());
    t.scales.resize(scales.size());
    const int64_t gn = fp8_scale_groups(n), gk = fp8_scale_groups(k);
    transpose_fp8_blockwise_weights(host(q.data(), DType::kFloat8E4M3, {e, n, k}),
                                    host(scales.data(), DType::kFloat32, {e, gn, gk}),
                                    host(t.q.data(), DType::kFloat8E4M3, {e, k, n}),
                                    host(t.scales.data(), DType::kFloat32, {e, gk, gn}));
    return t;
  }
};

// A [rows, N] operand of the wgrad, column-wise grouped: [N, 128·G] codes, [G, N] scales.
struct Fp8Cols {
  std::vector<uint8_t> q;
  std::vector<float> scales;
  int64_t n, groups;

  Fp8Cols(std::vector<float> x, int64_t rows, int64_t n_, std::vector<int32_t>& offsets)
      : n(n_), groups(fp8_colwise_groups(rows, static_cast<int64_t>(offsets.size()) - 1)) {
    q.resize(static_cast<size_t>(n * kFp8ScaleGroup * groups));
    scales.resize(static_cast<size_t>(groups * n));
    quantize_fp8_colwise_grouped(
        host(x.data(), DType::kFloat32, {rows, n}),
        host(offsets.data(), DType::kInt32, {static_cast<int64_t>(offsets.size())}),
        host(q.data(), DType::kFloat8E4M3, {n, kFp8ScaleGroup * groups}),
        host(scales.data(), DType::kFloat32, {groups, n}));
  }
  TensorView codes() { return host(q.data(), DType::kFloat8E4M3, {n, kFp8ScaleGroup * groups}); }
  TensorView scale_view() { return host(scales.data(), DType::kFloat32, {groups, n}); }
};

// d [E, N_a, N_b] fp32 = the FP8 k-grouped wgrad of a and b.
void fp8_wgrad(Fp8Cols a, Fp8Cols b, std::vector<int32_t>& offsets, float* d) {
  const int64_t e = static_cast<int64_t>(offsets.size()) - 1;
  grouped_gemm_fp8_wgrad({.at = a.codes(),
                          .a_scales = a.scale_view(),
                          .bt = b.codes(),
                          .b_scales = b.scale_view(),
                          .offsets = host(offsets.data(), DType::kInt32, {e + 1}),
                          .d = host(d, DType::kFloat32, {e, a.n, b.n})});
}

// One FP8 GEMM over the routed rows, bf16 output [rows, n_out] as floats.
std::vector<float> fp8_gemm(const Fp8Rows& a, const Fp8Weight& b, std::vector<int32_t>& offsets,
                            int64_t rows, int64_t e, int64_t n, int64_t k, int64_t n_out,
                            const MoeConfig& c, bool activation, std::vector<float>* row_scale,
                            std::vector<float>* bias) {
  std::vector<uint16_t> d(static_cast<size_t>(rows * n_out), 0);
  grouped_gemm_fp8(GroupedGemmFp8Args{
      .a = host(a.q.data(), DType::kFloat8E4M3, {rows, k}),
      .a_scales =
          host(a.scales.data(), DType::kFloat32, {fp8_scale_groups(k), fp8_scale_rows(rows)}),
      .b = host(b.q.data(), DType::kFloat8E4M3, {e, n, k}),
      .b_scales =
          host(b.scales.data(), DType::kFloat32, {e, fp8_scale_groups(n), fp8_scale_groups(k)}),
      .offsets = host(offsets.data(), DType::kInt32, {e + 1}),
      .d = host(d.data(), DType::kBFloat16, {rows, n_out}),
      .epilogue = activation ? GemmEpilogue::kActivation : GemmEpilogue::kLinear,
      .activation = c.activation,
      .clamped_swiglu = c.clamped_swiglu,
      .row_scale = row_scale ? host(row_scale->data(), DType::kFloat32, {rows}) : TensorView{},
      .bias = bias ? host(bias->data(), DType::kFloat32, {e, n}) : TensorView{},
      .pre_activation = {}});
  return widen(d);
}

}  // namespace

std::vector<float> layer_forward_fp8(const MoeConfig& c, const LayerWeights& w,
                                     const TensorView& x, const LayerForward& f) {
  const int64_t E = c.num_experts, H = c.hidden, F = c.ffn;
  const int64_t fc1 = c.fc1_width();
  const int64_t R = static_cast<int64_t>(f.token_of_row.size());
  std::vector<int32_t> offsets = f.offsets;

  const Fp8Weight w1q(glu_rows(c, copy_of(w.experts.w1), {E, fc1, H}, true), E, fc1, H),
      w2q(copy_of(w.experts.w2), E, H, F);
  // Biases (config.expert_bias): b1 interleaved like W1's rows, b2 as is.
  std::vector<float> b1, b2;
  if (c.expert_bias) {
    b1 = glu_rows(c, copy_of(w.experts.b1), {E, fc1}, true);
    b2 = copy_of(w.experts.b2);
  }
  std::vector<float>* b1p = c.expert_bias ? &b1 : nullptr;
  std::vector<float>* b2p = c.expert_bias ? &b2 : nullptr;

  const Fp8Rows xs(std::vector<float>(f.xs.begin(), f.xs.begin() + R * H), R, H);
  const std::vector<float> act =
      fp8_gemm(xs, w1q, offsets, R, E, fc1, H, F, c, /*activation=*/true, nullptr, b1p);
  std::vector<float> row_prob = row_probabilities(f, R);
  const std::vector<float> ys =
      fp8_gemm(Fp8Rows(act, R, F), w2q, offsets, R, E, H, F, H, c, false, &row_prob, b2p);

  return combine_routed(c, w, x, f, ys);
}

void layer_backward_fp8(const MoeConfig& c, const LayerWeights& w, const TensorView& x,
                        const LayerForward& f, const TensorView& dy, const LayerGrads& grads) {
  const int64_t R = check_routed_backward(c, x, f, dy, grads);
  const int64_t E = c.num_experts, H = c.hidden, F = c.ffn, fc1 = c.fc1_width();
  std::vector<int32_t> offsets = f.offsets;
  const TensorView offsets_view = host(offsets.data(), DType::kInt32, {E + 1});

  // The weights as prepare_fp8_weights leaves them, and the transposed copies the dgrads read.
  const Fp8Weight w1q(glu_rows(c, copy_of(w.experts.w1), {E, fc1, H}, true), E, fc1, H),
      w2q(copy_of(w.experts.w2), E, H, F);
  const Fp8Weight w1t = w1q.transposed(E, fc1, H), w2t = w2q.transposed(E, H, F);
  std::vector<float> b1, b2;
  if (c.expert_bias) {
    b1 = glu_rows(c, copy_of(w.experts.b1), {E, fc1}, true);
    b2 = copy_of(w.experts.b2);
  }

  // Recompute: pre (interleaved, + b1) from the forward's xs codes, bf16.
  const std::vector<float> xs(f.xs.begin(), f.xs.begin() + R * H);
  const std::vector<uint16_t> pre = to_bf16(fp8_gemm(Fp8Rows(xs, R, H), w1q, offsets, R, E, fc1,
                                                     H, fc1, c, /*activation=*/false, nullptr,
                                                     c.expert_bias ? &b1 : nullptr));

  const std::vector<float> dys = routed_dy(f, dy, H);
  const std::vector<uint16_t> dys_bf16 = to_bf16(dys);

  // FC2 dgrad with dGLU and dp.
  std::vector<float> row_prob = row_probabilities(f, R), dp(static_cast<size_t>(R), 0.0f);
  std::vector<uint16_t> d_pre_bits(static_cast<size_t>(R * fc1), 0),
      scaled_act_bits(static_cast<size_t>(R * F), 0);
  const Fp8Rows dys_q(dys, R, H);
  fc2_dgrad_fp8({.dys = host(dys_q.q.data(), DType::kFloat8E4M3, {R, H}),
                 .dys_scales = host(dys_q.scales.data(), DType::kFloat32,
                                    {fp8_scale_groups(H), fp8_scale_rows(R)}),
                 .w2t = host(w2t.q.data(), DType::kFloat8E4M3, {E, F, H}),
                 .w2t_scales = host(w2t.scales.data(), DType::kFloat32,
                                    {E, fp8_scale_groups(F), fp8_scale_groups(H)}),
                 .offsets = offsets_view,
                 .pre = host(pre.data(), DType::kBFloat16, {R, fc1}),
                 .d_pre = host(d_pre_bits.data(), DType::kBFloat16, {R, fc1}),
                 .activation = c.activation,
                 .clamped_swiglu = c.clamped_swiglu,
                 .row_scale = host(row_prob.data(), DType::kFloat32, {R}),
                 .scaled_act = host(scaled_act_bits.data(), DType::kBFloat16, {R, F}),
                 .d_row_scale = host(dp.data(), DType::kFloat32, {R}),
                 .b2 = c.expert_bias ? host(b2.data(), DType::kFloat32, {E, H}) : TensorView{},
                 .dys_bf16 = c.expert_bias ? host(dys_bf16.data(), DType::kBFloat16, {R, H})
                                             : TensorView{}});
  const std::vector<float> d_pre = widen(d_pre_bits), scaled_act = widen(scaled_act_bits);

  // FC1 dgrad on W1ᵀ.
  std::vector<float> dxs = fp8_gemm(Fp8Rows(d_pre, R, fc1), w1t, offsets, R, E, H, fc1, H, c,
                                    /*activation=*/false, nullptr, nullptr);

  // Weight gradients from column-wise FP8 operands, or (bf16_wgrad) from the bf16 ones; d_w1
  // comes back interleaved.
  std::vector<float> dw1(static_cast<size_t>(E * fc1 * H));
  if (c.bf16_wgrad) {
    wgrad_fp64(dys, H, scaled_act, F, offsets, grads.experts.w2.as<float>());
    wgrad_fp64(d_pre, fc1, xs, H, offsets, dw1.data());
  } else {
    fp8_wgrad(Fp8Cols(dys, R, H, offsets), Fp8Cols(scaled_act, R, F, offsets), offsets,
              grads.experts.w2.as<float>());
    fp8_wgrad(Fp8Cols(d_pre, R, fc1, offsets), Fp8Cols(xs, R, H, offsets), offsets, dw1.data());
  }
  finish_layer_backward(c, w, x, f, dy,
                        {.dxs = std::move(dxs), .d_w1 = std::move(dw1), .d_pre = d_pre,
                         .dys = dys, .dp = std::move(dp)},
                        grads);
}

}  // namespace moefuse::ref
