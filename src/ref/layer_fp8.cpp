#include "ref/layer_fp8.h"

#include <cstdint>
#include <cstring>
#include <vector>

#include "moefuse/error.h"
#include "moefuse/grouped_gemm.h"
#include "moefuse/grouped_gemm_fp8.h"
#include "ref/expert_mlp.h"
#include "ref/grouped_gemm_fp8.h"
#include "ref/quant.h"

namespace moefuse::ref {
namespace {

TensorView host(void* p, DType dtype, std::initializer_list<int64_t> shape) {
  return TensorView::contiguous(p, dtype, shape);
}

float from_bf16_bits(uint16_t h) {
  const uint32_t u = uint32_t{h} << 16;
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
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
};

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
      .bias = bias ? host(bias->data(), DType::kFloat32, {e, n}) : TensorView{}});
  std::vector<float> out(d.size());
  for (size_t i = 0; i < d.size(); ++i) out[i] = from_bf16_bits(d[i]);
  return out;
}

}  // namespace

std::vector<float> layer_forward_fp8(const MoeConfig& c, const LayerWeights& w,
                                     const TensorView& x, const LayerForward& f) {
  const int64_t T = x.size(0), E = c.num_experts, H = c.hidden, F = c.ffn, k = c.top_k;
  const int64_t fc1 = c.fc1_width();
  const int64_t R = static_cast<int64_t>(f.token_of_row.size());
  std::vector<int32_t> offsets = f.offsets;

  std::vector<float> w1 = copy_of(w.experts.w1);
  if (is_glu(c.activation)) {
    std::vector<float> src = w1;
    interleave_glu_weight(host(src.data(), DType::kFloat32, {E, fc1, H}),
                          host(w1.data(), DType::kFloat32, {E, fc1, H}));
  }
  const Fp8Weight w1q(std::move(w1), E, fc1, H), w2q(copy_of(w.experts.w2), E, H, F);
  // Biases (config.expert_bias): b1 interleaved like W1's rows, b2 as is.
  std::vector<float> b1, b2;
  if (c.expert_bias) {
    b1 = copy_of(w.experts.b1);
    b2 = copy_of(w.experts.b2);
    if (is_glu(c.activation)) {
      std::vector<float> src = b1;
      interleave_glu_weight(host(src.data(), DType::kFloat32, {E, fc1}),
                            host(b1.data(), DType::kFloat32, {E, fc1}));
    }
  }
  std::vector<float>* b1p = c.expert_bias ? &b1 : nullptr;
  std::vector<float>* b2p = c.expert_bias ? &b2 : nullptr;

  const Fp8Rows xs(std::vector<float>(f.xs.begin(), f.xs.begin() + R * H), R, H);
  const std::vector<float> act =
      fp8_gemm(xs, w1q, offsets, R, E, fc1, H, F, c, /*activation=*/true, nullptr, b1p);
  std::vector<float> row_prob(static_cast<size_t>(R), 0.0f);
  for (int64_t i = 0; i < T * k; ++i)
    if (f.row_of[i] >= 0) row_prob[f.row_of[i]] = f.probs[i];
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

}  // namespace moefuse::ref
