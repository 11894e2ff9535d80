#include "ref/layer_fp8.h"

#include <cstdint>
#include <cstring>
#include <utility>
#include <vector>

#include "moefuse/grouped_gemm.h"
#include "moefuse/grouped_gemm_fp8.h"
#include "moefuse/grouped_gemm_fp8_dgrad.h"
#include "moefuse/grouped_gemm_fp8_wgrad.h"
#include "ref/grouped_gemm_fp8.h"
#include "ref/grouped_gemm_fp8_dgrad.h"
#include "ref/grouped_gemm_fp8_wgrad.h"
#include "ref/check.h"
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

// One FP8 GEMM over grouped rows, bf16 output [rows, n_out] as floats.
std::vector<float> fp8_gemm(const Fp8Rows& a, const Fp8Weight& b,
                            const std::vector<int32_t>& offsets, int64_t rows, int64_t e,
                            int64_t n, int64_t k, int64_t n_out, const MoeConfig& c,
                            bool activation, const std::vector<float>* row_scale,
                            const std::vector<float>* bias) {
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

// What one FP8 MLP's backward returns besides d_w2 (written in place).
struct Fp8MlpGrads {
  std::vector<float> dxs;    // [R, H]
  std::vector<float> d_w1;   // [E, fc1, H], interleaved
  std::vector<float> d_pre;  // [R, fc1], interleaved (bf16 values)
  std::vector<float> dp;     // [R]: d row scale (0 without one)
};

// One FP8 MLP over grouped rows as the GPU layer runs it: the routed experts (E experts, the
// routing probability as FC2's row scale, optional biases) or the shared expert (one expert over
// all T rows of x, neither). Its weights as prepare_fp8_weights leaves them: W1's GLU rows
// interleaved, 128x128 blocks, and (backward) their transposes.
struct Fp8Mlp {
  MoeConfig c;                   // its expert count, widths, activation and bf16_wgrad
  std::vector<int32_t> offsets;  // [E+1]
  std::vector<float> row_prob;   // [R], or empty: no row scale
  Fp8Weight w1, w2;              // [E, fc1, H], [E, H, F]
  std::vector<float> b1, b2;     // interleaved b1 [E, fc1], b2 [E, H], or empty

  Fp8Mlp(const MoeConfig& config, std::vector<int32_t> offsets_, std::vector<float> row_prob_,
         const TensorView& w1_ref, const TensorView& w2_ref, const TensorView& b1_ref,
         const TensorView& b2_ref)
      : c(config), offsets(std::move(offsets_)), row_prob(std::move(row_prob_)) {
    const int64_t E = c.num_experts, H = c.hidden, F = c.ffn, fc1 = c.fc1_width();
    w1 = Fp8Weight(glu_rows(c, copy_of(w1_ref), {E, fc1, H}, true), E, fc1, H);
    w2 = Fp8Weight(copy_of(w2_ref), E, H, F);
    if (!is_absent(b1_ref)) b1 = glu_rows(c, copy_of(b1_ref), {E, fc1}, true);
    if (!is_absent(b2_ref)) b2 = copy_of(b2_ref);
  }
  int64_t rows() const { return offsets.back(); }
  const std::vector<float>* scale() const { return row_prob.empty() ? nullptr : &row_prob; }
  const std::vector<float>* bias1() const { return b1.empty() ? nullptr : &b1; }
  const std::vector<float>* bias2() const { return b2.empty() ? nullptr : &b2; }

  // ys [R, H] (bf16 values) from the rows xs [R, H]: FC1 with the activation epilogue, act
  // rounded to bf16 and quantised 1x128 along F, FC2 with the row scale.
  std::vector<float> forward(const std::vector<float>& xs) const {
    const int64_t R = rows(), E = c.num_experts, H = c.hidden, F = c.ffn, fc1 = c.fc1_width();
    const std::vector<float> act =
        fp8_gemm(Fp8Rows(xs, R, H), w1, offsets, R, E, fc1, H, F, c, true, nullptr, bias1());
    return fp8_gemm(Fp8Rows(act, R, F), w2, offsets, R, E, H, F, H, c, false, scale(), bias2());
  }

  // The backward from the rows xs and their output gradients dys [R, H] (bf16 values):
  //   pre   = FP8 FC1 GEMM of xs's codes, linear epilogue + b1, bf16 (the forward's, recomputed)
  //   dys → e4m3 1x128 along H → ref::fc2_dgrad_fp8 on W2ᵀ → d_pre, p·act (bf16), dp
  //   d_pre → e4m3 1x128 along fc1 → FP8 GEMM on W1ᵀ → dxs (bf16)
  //   d_w2 = FP8 wgrad of dys and p·act, d_w1 = of d_pre and xs (column-wise operands, 128-row
  //   groups of one expert); with bf16_wgrad fp64 sums of the bf16 values instead.
  Fp8MlpGrads backward(const std::vector<float>& xs, const std::vector<float>& dys,
                       float* d_w2) const {
    const int64_t R = rows(), E = c.num_experts, H = c.hidden, F = c.ffn, fc1 = c.fc1_width();
    const Fp8Weight w1t = w1.transposed(E, fc1, H), w2t = w2.transposed(E, H, F);
    const std::vector<uint16_t> pre = to_bf16(
        fp8_gemm(Fp8Rows(xs, R, H), w1, offsets, R, E, fc1, H, fc1, c, false, nullptr, bias1()));
    const std::vector<uint16_t> dys_bf16 = to_bf16(dys);

    // FC2 dgrad with dGLU (and dp with a row scale).
    Fp8MlpGrads g{.dxs = {}, .d_w1 = {}, .d_pre = {}, .dp = std::vector<float>(R, 0.0f)};
    std::vector<uint16_t> d_pre_bits(static_cast<size_t>(R * fc1), 0),
        scaled_act_bits(static_cast<size_t>(R * F), 0);
    const Fp8Rows dys_q(dys, R, H);
    const bool scaled = scale() != nullptr, biased = bias2() != nullptr;
    fc2_dgrad_fp8({.dys = host(dys_q.q.data(), DType::kFloat8E4M3, {R, H}),
                   .dys_scales = host(dys_q.scales.data(), DType::kFloat32,
                                      {fp8_scale_groups(H), fp8_scale_rows(R)}),
                   .w2t = host(w2t.q.data(), DType::kFloat8E4M3, {E, F, H}),
                   .w2t_scales = host(w2t.scales.data(), DType::kFloat32,
                                      {E, fp8_scale_groups(F), fp8_scale_groups(H)}),
                   .offsets = host(offsets.data(), DType::kInt32, {E + 1}),
                   .pre = host(pre.data(), DType::kBFloat16, {R, fc1}),
                   .d_pre = host(d_pre_bits.data(), DType::kBFloat16, {R, fc1}),
                   .activation = c.activation,
                   .clamped_swiglu = c.clamped_swiglu,
                   .row_scale = scaled ? host(row_prob.data(), DType::kFloat32, {R}) : TensorView{},
                   .scaled_act = host(scaled_act_bits.data(), DType::kBFloat16, {R, F}),
                   .d_row_scale = scaled ? host(g.dp.data(), DType::kFloat32, {R}) : TensorView{},
                   .b2 = biased ? host(b2.data(), DType::kFloat32, {E, H}) : TensorView{},
                   .dys_bf16 = biased ? host(dys_bf16.data(), DType::kBFloat16, {R, H})
                                      : TensorView{}});
    g.d_pre = widen(d_pre_bits);
    const std::vector<float> scaled_act = widen(scaled_act_bits);

    // FC1 dgrad on W1ᵀ.
    g.dxs = fp8_gemm(Fp8Rows(g.d_pre, R, fc1), w1t, offsets, R, E, H, fc1, H, c, false, nullptr,
                     nullptr);

    g.d_w1.resize(static_cast<size_t>(E * fc1 * H));
    std::vector<int32_t> off = offsets;
    if (c.bf16_wgrad) {
      wgrad_fp64(dys, H, scaled_act, F, off, d_w2);
      wgrad_fp64(g.d_pre, fc1, xs, H, off, g.d_w1.data());
    } else {
      fp8_wgrad(Fp8Cols(dys, R, H, off), Fp8Cols(scaled_act, R, F, off), off, d_w2);
      fp8_wgrad(Fp8Cols(g.d_pre, R, fc1, off), Fp8Cols(xs, R, H, off), off, g.d_w1.data());
    }
    return g;
  }
};

Fp8Mlp routed_mlp(const MoeConfig& c, const LayerWeights& w, const LayerForward& f) {
  const int64_t R = static_cast<int64_t>(f.token_of_row.size());
  const bool bias = c.expert_bias;
  return Fp8Mlp(c, f.offsets, row_probabilities(f, R), w.experts.w1, w.experts.w2,
                bias ? w.experts.b1 : TensorView{}, bias ? w.experts.b2 : TensorView{});
}

// The shared expert as the GPU layer runs it in FP8: one expert over all T rows of x, no bias,
// no row scale.
Fp8Mlp shared_mlp(const MoeConfig& c, const LayerWeights& w, int64_t T) {
  MoeConfig s = shared_expert_config(c);
  s.num_experts = 1, s.top_k = 1, s.expert_bias = false, s.router = RouterOptions{};
  expect_f32(w.shared_w1, "weights.shared_w1", {s.fc1_width(), c.hidden});
  expect_f32(w.shared_w2, "weights.shared_w2", {c.hidden, s.ffn});
  auto one = [](const TensorView& t) {
    return host(t.data, DType::kFloat32, {1, t.size(0), t.size(1)});
  };
  return Fp8Mlp(s, {0, static_cast<int32_t>(T)}, {}, one(w.shared_w1), one(w.shared_w2), {}, {});
}

// x's values rounded to bf16 (the GPU layer's x and dy are bf16).
std::vector<float> bf16_values(const TensorView& t) { return widen(to_bf16(copy_of(t))); }

}  // namespace

std::vector<float> layer_forward_fp8(const MoeConfig& c, const LayerWeights& w,
                                     const TensorView& x, const LayerForward& f) {
  const int64_t R = static_cast<int64_t>(f.token_of_row.size()), T = x.size(0);
  const std::vector<float> xs(f.xs.begin(), f.xs.begin() + R * c.hidden);
  std::vector<float> shared_y;
  if (c.shared_expert_ffn > 0) shared_y = shared_mlp(c, w, T).forward(bf16_values(x));
  return combine_routed(c, f, T, routed_mlp(c, w, f).forward(xs), shared_y);
}

void layer_backward_fp8(const MoeConfig& c, const LayerWeights& w, const TensorView& x,
                        const LayerForward& f, const TensorView& dy, const LayerGrads& grads) {
  const int64_t R = check_routed_backward(c, x, f, dy, grads);
  const int64_t H = c.hidden, T = x.size(0);
  const std::vector<float> xs(f.xs.begin(), f.xs.begin() + R * H);
  const std::vector<float> dys = routed_dy(f, dy, H);
  Fp8MlpGrads g = routed_mlp(c, w, f).backward(xs, dys, grads.experts.w2.as<float>());
  finish_layer_backward(c, w, x, f,
                        {.dxs = std::move(g.dxs), .d_w1 = std::move(g.d_w1),
                         .d_pre = std::move(g.d_pre), .dys = dys, .dp = std::move(g.dp)},
                        grads);
  if (c.shared_expert_ffn == 0) return;
  // The shared expert: dx += its dxs; d_shared_w1 back in the reference's [gate; up] order.
  const Fp8Mlp shared = shared_mlp(c, w, T);
  const Fp8MlpGrads sg =
      shared.backward(bf16_values(x), bf16_values(dy), grads.d_shared_w2.as<float>());
  float* dx = grads.dx.as<float>();
  for (int64_t i = 0; i < T * H; ++i)
    dx[i] = static_cast<float>(static_cast<double>(dx[i]) + sg.dxs[i]);
  const int64_t s_fc1 = shared.c.fc1_width();
  const std::vector<float> dsw1 = glu_rows(shared.c, sg.d_w1, {1, s_fc1, H}, false);
  std::memcpy(grads.d_shared_w1.as<float>(), dsw1.data(), dsw1.size() * sizeof(float));
}

}  // namespace moefuse::ref
