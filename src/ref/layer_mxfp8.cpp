#include "ref/layer_mxfp8.h"

#include <cstdint>
#include <utility>
#include <vector>

#include "moefuse/grouped_gemm.h"
#include "moefuse/grouped_gemm_backward.h"
#include "ref/expert_mlp.h"
#include "ref/fc2_dgrad_epilogue.h"
#include "ref/gemm.h"
#include "ref/layer_parts.h"
#include "ref/quant.h"

namespace moefuse::ref {
namespace {

// The values the GPU's qdq passes store: MXFP8 quantise-dequantise of [rows, k] along k (rows)
// or down the rows (cols: 32-row blocks from each expert's first row, or from row 0 when
// `offsets` is null), rounded to bf16.
std::vector<float> qdq_rows(const std::vector<float>& v, int64_t rows, int64_t k) {
  std::vector<float> out(v.size());
  qdq_mxfp8_rows(host(v.data(), DType::kFloat32, {rows, k}),
                 host(out.data(), DType::kFloat32, {rows, k}));
  return widen(to_bf16(out));
}

std::vector<float> qdq_cols(const std::vector<float>& v, int64_t rows, int64_t n,
                            const std::vector<int32_t>* offsets) {
  std::vector<float> out(v);
  qdq_mxfp8_cols(host(v.data(), DType::kFloat32, {rows, n}),
                 offsets ? host(offsets->data(), DType::kInt32,
                                {static_cast<int64_t>(offsets->size())})
                         : TensorView{},
                 host(out.data(), DType::kFloat32, {rows, n}));
  return widen(to_bf16(out));
}

// d[r] = Σ_k a[r, k] · b_e(k, n) in fp64 over the rows of each expert e: a [R, K] row-major,
// b_of(e) expert e's [K, N] operand.
template <class BOf>
std::vector<double> grouped_product(const std::vector<float>& a, int64_t K, int64_t N,
                                    const std::vector<int32_t>& offsets, BOf b_of) {
  std::vector<double> d(static_cast<size_t>(offsets.back()) * N, 0.0);
  for (size_t e = 0; e + 1 < offsets.size(); ++e) {
    const int64_t r0 = offsets[e], n = offsets[e + 1] - r0;
    matmul(n, N, K, rows_of(a.data() + r0 * K, K), b_of(static_cast<int64_t>(e)),
           d.data() + r0 * N, false);
  }
  return d;
}

std::vector<float> rounded(const std::vector<double>& v) {
  return widen(to_bf16(std::vector<float>(v.begin(), v.end())));
}

// The routed experts' forward: pre (interleaved), act and ys, as the GPU stores them.
struct Routed {
  std::vector<float> pre, act, ys;
};

Routed routed_forward(const MoeConfig& c, const LayerWeights& w, const LayerForward& f) {
  const int64_t E = c.num_experts, H = c.hidden, F = c.ffn, fc1 = c.fc1_width();
  const int64_t R = static_cast<int64_t>(f.token_of_row.size());
  const std::vector<int32_t>& off = f.offsets;
  const std::vector<float> w1 =
      qdq_rows(glu_rows(c, copy_of(w.experts.w1), {E, fc1, H}, true), E * fc1, H);
  const std::vector<float> w2 = qdq_rows(copy_of(w.experts.w2), E * H, F);
  const std::vector<float> xs =
      qdq_rows(std::vector<float>(f.xs.begin(), f.xs.begin() + R * H), R, H);
  std::vector<double> pre = grouped_product(xs, H, fc1, off, [&](int64_t e) {
    return rows_of(w1.data() + e * fc1 * H, H).transposed();
  });
  const bool glu = is_glu(c.activation);
  std::vector<double> row(fc1), act(static_cast<size_t>(R * F));
  for (int64_t e = 0; e < E; ++e)
    for (int64_t r = off[e]; r < off[e + 1]; ++r) {
      for (int64_t i = 0; i < fc1; ++i) {  // + b1, and to the reference [gate; up] order
        const int64_t col = glu ? glu_interleaved_row(i, F) : i;
        double& p = pre[r * fc1 + col];
        if (c.expert_bias) p += w.experts.b1.as<const float>()[e * fc1 + i];
        row[i] = p;
      }
      activation_forward(c, row.data(), act.data() + r * F);
    }
  Routed out{.pre = rounded(pre), .act = rounded(act), .ys = {}};
  const std::vector<float> act_q = qdq_rows(out.act, R, F);
  std::vector<double> ys = grouped_product(act_q, F, H, off, [&](int64_t e) {
    return rows_of(w2.data() + e * H * F, F).transposed();
  });
  const std::vector<float> row_prob = row_probabilities(f, R);
  for (int64_t e = 0; e < E; ++e)
    for (int64_t r = off[e]; r < off[e + 1]; ++r)
      for (int64_t h = 0; h < H; ++h) {
        double& y = ys[r * H + h];
        if (c.expert_bias) y += w.experts.b2.as<const float>()[e * H + h];
        y *= row_prob[r];
      }
  out.ys = rounded(ys);
  return out;
}

}  // namespace

std::vector<float> layer_forward_mxfp8(const MoeConfig& c, const LayerWeights& w,
                                       const TensorView& x, const LayerForward& f) {
  return combine_routed(c, f, x.size(0), routed_forward(c, w, f).ys,
                        shared_expert_forward(c, w, x));
}

void layer_backward_mxfp8(const MoeConfig& c, const LayerWeights& w, const TensorView& x,
                          const LayerForward& f, const TensorView& dy, const LayerGrads& grads) {
  const int64_t R = check_routed_backward(c, x, f, dy, grads);
  const int64_t E = c.num_experts, H = c.hidden, F = c.ffn, fc1 = c.fc1_width();
  const std::vector<int32_t>& off = f.offsets;
  const Routed fwd = routed_forward(c, w, f);

  // The dgrads' weights, quantised along their K (H for W2, fc1 for W1): down the rows of each
  // expert's [H, F] and [fc1, H] (32 divides H and fc1, so no block spans two experts).
  const std::vector<float> w2 = qdq_cols(copy_of(w.experts.w2), E * H, F, nullptr);
  const std::vector<float> w1 =
      qdq_cols(glu_rows(c, copy_of(w.experts.w1), {E, fc1, H}, true), E * fc1, H, nullptr);

  const std::vector<float> dys = routed_dy(f, dy, H);
  const std::vector<float> dys_q = qdq_rows(dys, R, H);
  const std::vector<float> g = rounded(grouped_product(
      dys_q, H, F, off, [&](int64_t e) { return rows_of(w2.data() + e * H * F, F); }));
  std::vector<float> row_prob = row_probabilities(f, R), dp(static_cast<size_t>(R), 0.0f);
  std::vector<float> b2;
  if (c.expert_bias) b2 = copy_of(w.experts.b2);
  const std::vector<uint16_t> pre_bits = to_bf16(fwd.pre), dys_q_bits = to_bf16(dys_q);
  std::vector<uint16_t> d_pre_bits(static_cast<size_t>(R * fc1)),
      scaled_act_bits(static_cast<size_t>(R * F));
  const TensorView offsets = host(off.data(), DType::kInt32, {E + 1});
  fc2_dgrad_epilogue({.dys = host(dys_q_bits.data(), DType::kBFloat16, {R, H}),
                      .w2 = {},
                      .offsets = offsets,
                      .pre = host(pre_bits.data(), DType::kBFloat16, {R, fc1}),
                      .d_pre = host(d_pre_bits.data(), DType::kBFloat16, {R, fc1}),
                      .activation = c.activation,
                      .clamped_swiglu = c.clamped_swiglu,
                      .row_scale = host(row_prob.data(), DType::kFloat32, {R}),
                      .scaled_act = host(scaled_act_bits.data(), DType::kBFloat16, {R, F}),
                      .d_row_scale = host(dp.data(), DType::kFloat32, {R}),
                      .b2 = c.expert_bias ? host(b2.data(), DType::kFloat32, {E, H})
                                          : TensorView{},
                      .d_b2 = {}},
                     g.data());
  const std::vector<float> d_pre = widen(d_pre_bits), scaled_act = widen(scaled_act_bits);

  std::vector<float> dxs = rounded(grouped_product(
      qdq_rows(d_pre, R, fc1), fc1, H, off,
      [&](int64_t e) { return rows_of(w1.data() + e * fc1 * H, H); }));

  const std::vector<float> xs(f.xs.begin(), f.xs.begin() + R * H);
  std::vector<float> dw1(static_cast<size_t>(E * fc1 * H));
  if (c.bf16_wgrad) {
    wgrad_fp64(dys, H, scaled_act, F, off, grads.experts.w2.as<float>());
    wgrad_fp64(d_pre, fc1, xs, H, off, dw1.data());
  } else {
    wgrad_fp64(qdq_cols(dys, R, H, &off), H, qdq_cols(scaled_act, R, F, &off), F, off,
               grads.experts.w2.as<float>());
    wgrad_fp64(qdq_cols(d_pre, R, fc1, &off), fc1, qdq_cols(xs, R, H, &off), H, off,
               dw1.data());
  }
  finish_layer_backward(c, w, x, f,
                        {.dxs = std::move(dxs), .d_w1 = std::move(dw1), .d_pre = d_pre,
                         .dys = dys, .dp = std::move(dp)},
                        grads);
  shared_expert_backward(c, w, x, f, dy, grads);  // MXFP8 keeps the shared expert bf16
}

}  // namespace moefuse::ref
