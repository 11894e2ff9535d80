#include "ref/layer_fp8.h"

#include <cstdint>
#include <cstring>
#include <vector>

#include "moefuse/error.h"
#include "moefuse/grouped_gemm.h"
#include "moefuse/grouped_gemm_fp8.h"
#include "moefuse/grouped_gemm_fp8_dgrad.h"
#include "moefuse/grouped_gemm_fp8_wgrad.h"
#include "ref/bf16_bits.h"
#include "ref/check.h"
#include "ref/dispatch.h"
#include "ref/expert_mlp.h"
#include "ref/gemm.h"
#include "ref/grouped_gemm_fp8.h"
#include "ref/grouped_gemm_fp8_dgrad.h"
#include "ref/grouped_gemm_fp8_wgrad.h"
#include "ref/quant.h"

namespace moefuse::ref {
namespace {

TensorView host(void* p, DType dtype, std::initializer_list<int64_t> shape) {
  return TensorView::contiguous(p, dtype, shape);
}

std::vector<uint16_t> to_bf16(const std::vector<float>& v) {
  std::vector<uint16_t> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = bf16_bits(v[i]);
  return out;
}

std::vector<float> widen(const std::vector<uint16_t>& v) {
  std::vector<float> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = bf16_value(v[i]);
  return out;
}

// A GLU weight or bias [outer, fc1(, inner)] between the reference's [gate; up] rows and the
// GPU's interleaved ones (the identity for the other activations).
std::vector<float> glu_rows(const MoeConfig& c, std::vector<float> v,
                            std::initializer_list<int64_t> shape, bool interleave) {
  if (!is_glu(c.activation)) return v;
  std::vector<float> out(v.size());
  const TensorView src = host(v.data(), DType::kFloat32, shape);
  const TensorView dst = host(out.data(), DType::kFloat32, shape);
  if (interleave) interleave_glu_weight(src, dst);
  else deinterleave_glu_weight(src, dst);
  return out;
}

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
    auto cv = [](const auto& v, DType dtype, std::initializer_list<int64_t> shape) {
      return host(const_cast<void*>(static_cast<const void*>(v.data())), dtype, shape);
    };
    transpose_fp8_blockwise_weights(cv(q, DType::kFloat8E4M3, {e, n, k}),
                                    cv(scales, DType::kFloat32, {e, gn, gk}),
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

// d [E, N_a, N_b] fp32 = Σ over each expert's rows of a[r]ᵀ·b[r] in fp64 (a [rows, N_a] and
// b [rows, N_b] hold bf16 values): the wgrads with config.bf16_wgrad.
void bf16_wgrad(const std::vector<float>& a, int64_t n_a, const std::vector<float>& b,
                int64_t n_b, const std::vector<int32_t>& offsets, float* d) {
  std::vector<double> sum(static_cast<size_t>(n_a * n_b));
  for (size_t e = 0; e + 1 < offsets.size(); ++e) {
    const int64_t r0 = offsets[e], n = offsets[e + 1] - r0;
    matmul(n_a, n_b, n, rows_of(a.data() + r0 * n_a, n_a).transposed(),
           rows_of(b.data() + r0 * n_b, n_b), sum.data(), false);
    for (size_t i = 0; i < sum.size(); ++i) d[e * sum.size() + i] = static_cast<float>(sum[i]);
  }
}

// row_prob[row_of[i]] = probs[i]: the routing probability of each expert row.
std::vector<float> row_probabilities(const LayerForward& f, int64_t rows) {
  std::vector<float> row_prob(static_cast<size_t>(rows), 0.0f);
  for (size_t i = 0; i < f.row_of.size(); ++i)
    if (f.row_of[i] >= 0) row_prob[f.row_of[i]] = f.probs[i];
  return row_prob;
}

std::vector<float> copy_of(const TensorView& t) {
  const float* p = t.as<float>();
  return std::vector<float>(p, p + t.numel());
}

// One FP8 GEMM over the routed rows, bf16 output [rows, n_out] as floats.
std::vector<float> fp8_gemm(const Fp8Rows& a, const Fp8Weight& b, std::vector<int32_t>& offsets,
                            int64_t rows, int64_t e, int64_t n, int64_t k, int64_t n_out,
                            const MoeConfig& c, bool activation, std::vector<float>* row_scale,
                            std::vector<float>* bias) {
  std::vector<uint16_t> d(static_cast<size_t>(rows * n_out), 0);
  auto cview = [](const auto& v, DType dtype, std::initializer_list<int64_t> shape) {
    return host(const_cast<void*>(static_cast<const void*>(v.data())), dtype, shape);
  };
  grouped_gemm_fp8(GroupedGemmFp8Args{
      .a = cview(a.q, DType::kFloat8E4M3, {rows, k}),
      .a_scales = cview(a.scales, DType::kFloat32, {fp8_scale_groups(k), fp8_scale_rows(rows)}),
      .b = cview(b.q, DType::kFloat8E4M3, {e, n, k}),
      .b_scales = cview(b.scales, DType::kFloat32, {e, fp8_scale_groups(n), fp8_scale_groups(k)}),
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
  const int64_t T = x.size(0), E = c.num_experts, H = c.hidden, F = c.ffn, k = c.top_k;
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

  std::vector<float> y(static_cast<size_t>(T * H), 0.0f);
  for (int64_t t = 0; t < T; ++t)
    for (int64_t j = 0; j < k; ++j) {
      const int32_t r = f.row_of[t * k + j];
      if (r < 0) continue;
      for (int64_t h = 0; h < H; ++h) y[t * H + h] += ys[r * H + h];
    }
  if (c.shared_expert_ffn > 0) {
    MoeConfig s = shared_expert_config(c);
    // One expert over all T rows, as ref::layer_forward runs it (validated as such).
    s.num_experts = 1, s.top_k = 1, s.router = RouterOptions{};
    std::vector<int32_t> shared_offsets = {0, static_cast<int32_t>(T)};
    std::vector<float> pre(T * s.fc1_width()), sact(T * s.ffn), sy(T * H);
    expert_mlp_forward(s, x, host(shared_offsets.data(), DType::kInt32, {2}),
                       {.w1 = host(w.shared_w1.data, DType::kFloat32, {1, s.fc1_width(), H}),
                        .b1 = {},
                        .w2 = host(w.shared_w2.data, DType::kFloat32, {1, H, s.ffn}),
                        .b2 = {}},
                       host(pre.data(), DType::kFloat32, {T, s.fc1_width()}),
                       host(sact.data(), DType::kFloat32, {T, s.ffn}),
                       host(sy.data(), DType::kFloat32, {T, H}));
    for (int64_t i = 0; i < T * H; ++i) y[i] += sy[i];
  }
  return y;
}

void layer_backward_fp8(const MoeConfig& c, const LayerWeights& w, const TensorView& x,
                        const LayerForward& f, const TensorView& dy, const LayerGrads& grads) {
  const int64_t T = x.size(0), E = c.num_experts, H = c.hidden, F = c.ffn, k = c.top_k;
  const int64_t fc1 = c.fc1_width();
  const int64_t R = static_cast<int64_t>(f.token_of_row.size());
  MOEFUSE_EXPECT(static_cast<int64_t>(f.xs.size()) == R * H && f.row_of.size() == size_t(T * k),
                 "forward", "ref::layer_forward's state for x", "other sizes");
  expect_f32(dy, "dy", {T, H});
  expect_f32(grads.dx, "grads.dx", {T, H});
  expect_f32(grads.experts.w1, "grads.d_w1", {E, fc1, H});
  expect_f32(grads.experts.w2, "grads.d_w2", {E, H, F});
  const char* no_bias = "config.expert_bias is false";
  expect_optional_f32(grads.experts.b1, "grads.d_b1", c.expert_bias, no_bias, {E, fc1});
  expect_optional_f32(grads.experts.b2, "grads.d_b2", c.expert_bias, no_bias, {E, H});
  std::vector<int32_t> offsets = f.offsets;
  const TensorView offsets_view = host(offsets.data(), DType::kInt32, {E + 1});
  auto cv = [](const auto& v, DType dtype, std::initializer_list<int64_t> shape) {
    return host(const_cast<void*>(static_cast<const void*>(v.data())), dtype, shape);
  };

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

  // dys[r] = dy[token_of_row[r]] (the probability is FC2's row scale).
  std::vector<float> dys(static_cast<size_t>(R * H), 0.0f);
  const float* dyp = dy.as<float>();
  for (int64_t r = 0; r < R; ++r)
    if (f.token_of_row[r] >= 0)
      for (int64_t h = 0; h < H; ++h) dys[r * H + h] = dyp[f.token_of_row[r] * H + h];
  const std::vector<uint16_t> dys_bf16 = to_bf16(dys);
  dys = widen(dys_bf16);

  // FC2 dgrad with dGLU and dp.
  std::vector<float> row_prob = row_probabilities(f, R), dp(static_cast<size_t>(R), 0.0f);
  std::vector<uint16_t> d_pre_bits(static_cast<size_t>(R * fc1), 0),
      scaled_act_bits(static_cast<size_t>(R * F), 0);
  const Fp8Rows dys_q(dys, R, H);
  fc2_dgrad_fp8({.dys = cv(dys_q.q, DType::kFloat8E4M3, {R, H}),
                 .dys_scales = cv(dys_q.scales, DType::kFloat32,
                                  {fp8_scale_groups(H), fp8_scale_rows(R)}),
                 .w2t = cv(w2t.q, DType::kFloat8E4M3, {E, F, H}),
                 .w2t_scales = cv(w2t.scales, DType::kFloat32,
                                  {E, fp8_scale_groups(F), fp8_scale_groups(H)}),
                 .offsets = offsets_view,
                 .pre = cv(pre, DType::kBFloat16, {R, fc1}),
                 .d_pre = host(d_pre_bits.data(), DType::kBFloat16, {R, fc1}),
                 .activation = c.activation,
                 .clamped_swiglu = c.clamped_swiglu,
                 .row_scale = host(row_prob.data(), DType::kFloat32, {R}),
                 .scaled_act = host(scaled_act_bits.data(), DType::kBFloat16, {R, F}),
                 .d_row_scale = host(dp.data(), DType::kFloat32, {R}),
                 .b2 = c.expert_bias ? host(b2.data(), DType::kFloat32, {E, H}) : TensorView{},
                 .dys_bf16 = c.expert_bias ? cv(dys_bf16, DType::kBFloat16, {R, H})
                                           : TensorView{}});
  const std::vector<float> d_pre = widen(d_pre_bits), scaled_act = widen(scaled_act_bits);

  // FC1 dgrad on W1ᵀ, then dx = Σ_j dxs.
  std::vector<float> dxs = fp8_gemm(Fp8Rows(d_pre, R, fc1), w1t, offsets, R, E, H, fc1, H, c,
                                    /*activation=*/false, nullptr, nullptr);
  permute_backward(host(dxs.data(), DType::kFloat32, {R, H}), cv(f.row_of, DType::kInt32, {T, k}),
                   grads.dx);

  // Weight gradients from column-wise FP8 operands, or (bf16_wgrad) from the bf16 ones; d_w1
  // comes back interleaved.
  std::vector<float> dw1(static_cast<size_t>(E * fc1 * H));
  if (c.bf16_wgrad) {
    bf16_wgrad(dys, H, scaled_act, F, offsets, grads.experts.w2.as<float>());
    bf16_wgrad(d_pre, fc1, xs, H, offsets, dw1.data());
  } else {
    fp8_wgrad(Fp8Cols(dys, R, H, offsets), Fp8Cols(scaled_act, R, F, offsets), offsets,
              grads.experts.w2.as<float>());
    fp8_wgrad(Fp8Cols(d_pre, R, fc1, offsets), Fp8Cols(xs, R, H, offsets), offsets, dw1.data());
  }
  dw1 = glu_rows(c, std::move(dw1), {E, fc1, H}, false);
  std::memcpy(grads.experts.w1.as<float>(), dw1.data(), dw1.size() * sizeof(float));

  // Bias gradients: fp64 segment sums of the bf16 tensors, as the GPU's segment_column_sum.
  if (c.expert_bias) {
    std::vector<double> db1(static_cast<size_t>(E * fc1), 0.0),
        db2(static_cast<size_t>(E * H), 0.0);
    for (int64_t e = 0; e < E; ++e)
      for (int64_t r = offsets[e]; r < offsets[e + 1]; ++r) {
        for (int64_t n = 0; n < fc1; ++n) db1[e * fc1 + n] += d_pre[r * fc1 + n];
        for (int64_t h = 0; h < H; ++h) db2[e * H + h] += double(row_prob[r]) * dys[r * H + h];
      }
    std::vector<float> b1g(db1.begin(), db1.end());
    b1g = glu_rows(c, std::move(b1g), {E, fc1}, false);
    std::memcpy(grads.experts.b1.as<float>(), b1g.data(), b1g.size() * sizeof(float));
    float* b2g = grads.experts.b2.as<float>();
    for (size_t i = 0; i < db2.size(); ++i) b2g[i] = static_cast<float>(db2[i]);
  }

  std::vector<float> d_probs(static_cast<size_t>(T * k), 0.0f);
  for (int64_t i = 0; i < T * k; ++i)
    if (f.row_of[i] >= 0) d_probs[i] = dp[f.row_of[i]];
  layer_backward_shared_and_router(c, w, x, f, dy, d_probs, grads);
}

}  // namespace moefuse::ref
