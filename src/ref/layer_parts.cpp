#include "ref/layer_parts.h"

#include <cstring>

#include "moefuse/error.h"
#include "moefuse/grouped_gemm.h"
#include "ref/bf16_bits.h"
#include "ref/check.h"
#include "ref/dispatch.h"
#include "ref/expert_mlp.h"
#include "ref/gemm.h"

namespace moefuse::ref {

TensorView host(const void* p, DType dtype, std::initializer_list<int64_t> shape) {
  return TensorView::contiguous(const_cast<void*>(p), dtype, shape);
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

std::vector<float> copy_of(const TensorView& t) {
  const float* p = t.as<float>();
  return std::vector<float>(p, p + t.numel());
}

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

std::vector<float> row_probabilities(const LayerForward& f, int64_t rows) {
  std::vector<float> row_prob(static_cast<size_t>(rows), 0.0f);
  for (size_t i = 0; i < f.row_of.size(); ++i)
    if (f.row_of[i] >= 0) row_prob[f.row_of[i]] = f.probs[i];
  return row_prob;
}

std::vector<float> routed_dy(const LayerForward& f, const TensorView& dy, int64_t H) {
  const int64_t R = static_cast<int64_t>(f.token_of_row.size());
  std::vector<float> dys(static_cast<size_t>(R * H), 0.0f);
  const float* dyp = dy.as<const float>();
  for (int64_t r = 0; r < R; ++r)
    if (f.token_of_row[r] >= 0)
      for (int64_t h = 0; h < H; ++h) dys[r * H + h] = dyp[f.token_of_row[r] * H + h];
  return widen(to_bf16(dys));
}

void wgrad_fp64(const std::vector<float>& a, int64_t n_a, const std::vector<float>& b,
                int64_t n_b, const std::vector<int32_t>& offsets, float* d) {
  std::vector<double> sum(static_cast<size_t>(n_a * n_b));
  for (size_t e = 0; e + 1 < offsets.size(); ++e) {
    const int64_t r0 = offsets[e], n = offsets[e + 1] - r0;
    matmul(n_a, n_b, n, rows_of(a.data() + r0 * n_a, n_a).transposed(),
           rows_of(b.data() + r0 * n_b, n_b), sum.data(), false);
    for (size_t i = 0; i < sum.size(); ++i) d[e * sum.size() + i] = static_cast<float>(sum[i]);
  }
}

std::vector<float> combine_routed(const MoeConfig& c, const LayerForward& f, int64_t T,
                                  const std::vector<float>& ys,
                                  const std::vector<float>& shared_y) {
  const int64_t H = c.hidden, k = c.top_k;
  std::vector<float> y(static_cast<size_t>(T * H), 0.0f);
  for (int64_t t = 0; t < T; ++t)
    for (int64_t j = 0; j < k; ++j) {
      const int32_t r = f.row_of[t * k + j];
      if (r < 0) continue;
      for (int64_t h = 0; h < H; ++h) y[t * H + h] += ys[r * H + h];
    }
  for (size_t i = 0; i < shared_y.size(); ++i) y[i] += shared_y[i];
  return y;
}

int64_t check_routed_backward(const MoeConfig& c, const TensorView& x, const LayerForward& f,
                              const TensorView& dy, const LayerGrads& grads) {
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
  const MoeConfig s = shared_expert_config(c);
  const bool shared = c.shared_expert_ffn > 0;
  const char* no_shared = "config.shared_expert_ffn is 0";
  expect_optional_f32(grads.d_shared_w1, "grads.d_shared_w1", shared, no_shared,
                      {s.fc1_width(), H});
  expect_optional_f32(grads.d_shared_w2, "grads.d_shared_w2", shared, no_shared, {H, s.ffn});
  return R;
}

void finish_layer_backward(const MoeConfig& c, const LayerWeights& w, const TensorView& x,
                           const LayerForward& f, RoutedGrads routed, const LayerGrads& grads) {
  const int64_t T = x.size(0), E = c.num_experts, H = c.hidden, k = c.top_k;
  const int64_t fc1 = c.fc1_width();
  const int64_t R = static_cast<int64_t>(f.token_of_row.size());
  permute_backward(host(routed.dxs.data(), DType::kFloat32, {R, H}),
                   host(const_cast<int32_t*>(f.row_of.data()), DType::kInt32, {T, k}), grads.dx);
  const std::vector<float> dw1 = glu_rows(c, std::move(routed.d_w1), {E, fc1, H}, false);
  std::memcpy(grads.experts.w1.as<float>(), dw1.data(), dw1.size() * sizeof(float));

  if (c.expert_bias) {
    const std::vector<float> row_prob = row_probabilities(f, R);
    std::vector<double> db1(static_cast<size_t>(E * fc1), 0.0),
        db2(static_cast<size_t>(E * H), 0.0);
    for (int64_t e = 0; e < E; ++e)
      for (int64_t r = f.offsets[e]; r < f.offsets[e + 1]; ++r) {
        for (int64_t n = 0; n < fc1; ++n) db1[e * fc1 + n] += routed.d_pre[r * fc1 + n];
        for (int64_t h = 0; h < H; ++h)
          db2[e * H + h] += double(row_prob[r]) * routed.dys[r * H + h];
      }
    const std::vector<float> b1g =
        glu_rows(c, std::vector<float>(db1.begin(), db1.end()), {E, fc1}, false);
    std::memcpy(grads.experts.b1.as<float>(), b1g.data(), b1g.size() * sizeof(float));
    float* b2g = grads.experts.b2.as<float>();
    for (size_t i = 0; i < db2.size(); ++i) b2g[i] = static_cast<float>(db2[i]);
  }

  std::vector<float> d_probs(static_cast<size_t>(T * k), 0.0f);
  for (int64_t i = 0; i < T * k; ++i)
    if (f.row_of[i] >= 0) d_probs[i] = routed.dp[f.row_of[i]];
  router_backward(c, w, x, f, d_probs, grads);
}

}  // namespace moefuse::ref
