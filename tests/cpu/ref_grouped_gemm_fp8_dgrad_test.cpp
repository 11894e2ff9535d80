// CPU tests of the FP8 dgrad's pieces (moefuse/grouped_gemm_fp8_dgrad.h, src/ref/
// grouped_gemm_fp8_dgrad.h) and the FP8 GEMM's bias:
//   - the weight transpose is a byte transpose of codes and scales, and equals quantising the
//     transposed weight (the blocks are the same blocks);
//   - the fp64 FC2 dgrad reference (dGLU epilogue) against the BF16 path's math: the kernel's
//     fp32 activation_grad (src/cuda/gemm/backward/activation_backward.h) on g computed from the
//     dequantised operands and rounded to bf16; and its FP8 error against unquantised operands
//     (printed);
//   - the bias of the forward reference (h + bias before the epilogue);
//   - every validation error, naming the argument.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "common/fp8_operands.h"
#include "common/test_util.h"
#include "cuda/gemm/backward/activation_backward.h"
#include "formats/fp8.h"
#include "moefuse/grouped_gemm.h"
#include "moefuse/grouped_gemm_fp8_dgrad.h"
#include "ref/expert_mlp.h"
#include "ref/grouped_gemm_fp8.h"
#include "ref/grouped_gemm_fp8_dgrad.h"
#include "ref/quant.h"
#include "ref_test_helpers.h"

namespace moefuse {
namespace {

using test::bf16_to_float;
using test::Fp8Rows;
using test::Fp8Weight;
using test::float_to_bf16;
using test::host;
using test::widen;

TEST(RefFp8WeightTranspose, IsTheByteTransposeAndEqualsQuantisingTheTranspose) {
  const int64_t E = 3, N = 400, K = 208;  // partial last blocks both ways
  std::vector<float> w = test::random_normal(E * N * K);
  Fp8Weight qw(w, E, N, K);
  std::vector<uint8_t> wt(E * K * N, 0xAB);
  std::vector<float> st(E * fp8_scale_groups(K) * fp8_scale_groups(N), -1.0f);
  ref::transpose_fp8_blockwise_weights(
      qw.codes(), qw.scales(), host(wt.data(), DType::kFloat8E4M3, {E, K, N}),
      host(st.data(), DType::kFloat32, {E, fp8_scale_groups(K), fp8_scale_groups(N)}));
  std::vector<float> w_t(E * K * N);
  for (int64_t e = 0; e < E; ++e)
    for (int64_t i = 0; i < N; ++i)
      for (int64_t j = 0; j < K; ++j) {
        ASSERT_EQ(wt[(e * K + j) * N + i], qw.q[(e * N + i) * K + j]) << e << " " << i << " " << j;
        w_t[(e * K + j) * N + i] = w[(e * N + i) * K + j];
      }
  Fp8Weight direct(w_t, E, K, N);
  EXPECT_TRUE(direct.q == wt);
  EXPECT_TRUE(direct.s == st);
}

// One FC2 dgrad problem on host tensors.
struct Fc2Problem {
  int64_t e, m, h, f, fc1;
  Activation act;
  std::vector<int32_t> offsets;
  std::vector<float> dys_f, w2_f, p, b2;
  std::vector<uint16_t> pre, dys_bf16;
  Fp8Rows dys;
  Fp8Weight w2t;
  std::vector<uint16_t> d_pre, scaled_act;
  std::vector<float> dp;

  Fc2Problem(Activation a, std::vector<int> counts, int64_t h_, int64_t f_, int spare)
      : e(counts.size()), m(0), h(h_), f(f_), fc1(is_glu(a) ? 2 * f_ : f_), act(a),
        offsets(make_offsets(counts, spare)), dys_f(bf16_values(test::random_normal(m * h))),
        w2_f(test::random_normal(e * f * h, 1.0f / std::sqrt(float(h)))),
        p(test::random_uniform(m, 0.1f, 1.0f)), b2(test::random_normal(e * h)),
        dys(dys_f, m, h), w2t(w2_f, e, f, h) {
    for (float v : test::random_normal(m * fc1, 1.5f)) pre.push_back(float_to_bf16(v));
    for (float v : dys_f) dys_bf16.push_back(float_to_bf16(v));
  }
  std::vector<int32_t> make_offsets(const std::vector<int>& counts, int spare) {
    std::vector<int32_t> o = test::offsets_of(counts, 2);  // two rows before the experts
    m = o.back() + spare;
    return o;
  }
  static std::vector<float> bf16_values(std::vector<float> v) {
    for (float& x : v) x = bf16_to_float(float_to_bf16(x));
    return v;
  }
  Fc2DgradFp8Args args() {
    d_pre.assign(m * fc1, 0xFFFF);
    scaled_act.assign(m * f, 0xFFFF);
    dp.assign(m, std::nanf(""));
    return {.dys = dys.codes(),
            .dys_scales = dys.scales(),
            .w2t = w2t.codes(),
            .w2t_scales = w2t.scales(),
            .offsets = test::i32(offsets, {e + 1}),
            .pre = host(pre.data(), DType::kBFloat16, {m, fc1}),
            .d_pre = host(d_pre.data(), DType::kBFloat16, {m, fc1}),
            .activation = act,
            .clamped_swiglu = {.alpha = 1.702f, .limit = 1.0f},
            .row_scale = test::f32(p, {m}),
            .scaled_act = host(scaled_act.data(), DType::kBFloat16, {m, f}),
            .d_row_scale = test::f32(dp, {m}),
            .b2 = test::f32(b2, {e, h}),
            .dys_bf16 = host(dys_bf16.data(), DType::kBFloat16, {m, h})};
  }
  int expert_of(int64_t r) const {
    return int(std::upper_bound(offsets.begin(), offsets.end(), r) - offsets.begin()) - 1;
  }
};

// The BF16 path's math: g from the dequantised (or the unquantised) operands in fp64, rounded to
// bf16 as both kernels hand it to their dGLU, then the kernel's fp32 activation_grad per element.
struct Expected {
  std::vector<float> d_pre, scaled_act, dp;
};
Expected kernel_math(const Fc2Problem& pb, bool quantised) {
  Expected x{std::vector<float>(pb.m * pb.fc1), std::vector<float>(pb.m * pb.f),
             std::vector<float>(pb.m)};
  const gemm::EpilogueParams ep{.op = gemm::activation_epilogue_op(pb.act),
                                .clamp_alpha = 1.702f, .clamp_limit = 1.0f};
  const bool glu = is_glu(pb.act);
  const int64_t ng = fp8_scale_groups(pb.f), hg = fp8_scale_groups(pb.h);
  for (int64_t r = pb.offsets.front(); r < pb.offsets.back(); ++r) {
    const int e = pb.expert_of(r);
    double dp = 0;
    for (int64_t i = 0; i < pb.f; ++i) {
      double g = 0;
      for (int64_t j = 0; j < pb.h; ++j) {
        const double w = quantised ? double(formats::e4m3_to_float(
                                         pb.w2t.q[(e * pb.f + i) * pb.h + j])) *
                                         pb.w2t.s[(e * ng + i / 128) * hg + j / 128]
                                   : pb.w2_f[(e * pb.f + i) * pb.h + j];
        g += (quantised ? pb.dys.deq(r, j) : pb.dys_f[r * pb.h + j]) * w;
      }
      const int64_t gate = glu ? glu_interleaved_row(i, pb.f) : i;
      const int64_t up = glu ? glu_interleaved_row(pb.f + i, pb.f) : 0;
      const auto a = gemm::bwd::activation_grad(ep, bf16_to_float(pb.pre[r * pb.fc1 + gate]),
                                                glu ? bf16_to_float(pb.pre[r * pb.fc1 + up]) : 0.f);
      const float gb = bf16_to_float(float_to_bf16(float(g)));
      const float d_act = pb.p[r] * gb;
      x.d_pre[r * pb.fc1 + gate] = d_act * a.d_gate;
      if (glu) x.d_pre[r * pb.fc1 + up] = d_act * a.d_up;
      x.scaled_act[r * pb.f + i] = pb.p[r] * a.value;
      dp += double(gb) * a.value;
    }
    for (int64_t j = 0; j < pb.h; ++j) dp += double(pb.dys_f[r * pb.h + j]) * pb.b2[e * pb.h + j];
    x.dp[r] = float(dp);
  }
  return x;
}

// Rows [first, end) of a [m, cols] tensor.
std::vector<float> rows_of(const std::vector<float>& v, int64_t cols, int64_t first, int64_t end) {
  return std::vector<float>(v.begin() + first * cols, v.begin() + end * cols);
}

TEST(RefFc2DgradFp8, MatchesTheBf16PathMathOnTheSameOperands) {
  for (Activation act : {Activation::kSwiGLU, Activation::kGeGLU, Activation::kReGLU,
                         Activation::kClampedSwiGLU, Activation::kSquaredReLU}) {
    SCOPED_TRACE(std::string(activation_name(act)));
    Fc2Problem pb(act, {5, 0, 17, 9}, 144, 136, 3);
    ref::fc2_dgrad_fp8(pb.args());
    const Expected want = kernel_math(pb, /*quantised=*/true);
    const int64_t first = pb.offsets.front(), end = pb.offsets.back();
    const std::vector<float> d_pre = widen(pb.d_pre), sa = widen(pb.scaled_act);
    EXPECT_LE(test::rel_norm_error(rows_of(d_pre, pb.fc1, first, end),
                                   rows_of(want.d_pre, pb.fc1, first, end)), 1e-2);
    EXPECT_LE(test::rel_norm_error(rows_of(sa, pb.f, first, end),
                                   rows_of(want.scaled_act, pb.f, first, end)), 1e-2);
    EXPECT_LE(test::rel_norm_error(rows_of(pb.dp, 1, first, end),
                                   rows_of(want.dp, 1, first, end)), 1e-4);
    // Rows outside the experts keep their poison.
    for (int64_t r : {int64_t{0}, int64_t{1}, end, pb.m - 1}) {
      EXPECT_EQ(pb.d_pre[r * pb.fc1], 0xFFFF) << "row " << r;
      EXPECT_TRUE(std::isnan(pb.dp[r])) << "row " << r;
    }
  }
}

// The quantisation error of the FP8 dgrad against unquantised operands: what the layer's
// backward tolerance builds on.
TEST(RefFc2DgradFp8, QuantisationErrorAgainstUnquantisedOperands) {
  for (Activation act : {Activation::kSwiGLU, Activation::kClampedSwiGLU}) {
    Fc2Problem pb(act, {40, 24}, 256, 128, 0);
    ref::fc2_dgrad_fp8(pb.args());
    const Expected exact = kernel_math(pb, /*quantised=*/false);
    const int64_t first = pb.offsets.front(), end = pb.offsets.back();
    const double e_dpre = test::rel_norm_error(rows_of(widen(pb.d_pre), pb.fc1, first, end),
                                               rows_of(exact.d_pre, pb.fc1, first, end));
    const double e_dp =
        test::rel_norm_error(rows_of(pb.dp, 1, first, end), rows_of(exact.dp, 1, first, end));
    std::printf("[ fp8 ] fc2 dgrad %-14s d_pre rel-norm error %.4f, dp %.4f\n",
                std::string(activation_name(act)).c_str(), e_dpre, e_dp);
    EXPECT_LE(e_dpre, 0.1);
    EXPECT_GE(e_dpre, 1e-3) << "the operands should have been quantised";
    EXPECT_LE(e_dp, 0.1);
  }
}

TEST(RefGroupedGemmFp8, BiasIsAddedBeforeTheEpilogue) {
  const int64_t E = 2, M = 20, N = 272, K = 160;
  Fp8Rows a(test::random_normal(M * K), M, K);
  Fp8Weight b(test::random_normal(E * N * K), E, N, K);
  std::vector<int32_t> offsets = {1, 9, 19};
  std::vector<float> bias = test::random_normal(E * N), zero(E * N, 0.0f);
  std::vector<float> with(M * N / 2), without(M * N / 2);
  // GLU with the bias folded in must equal GLU of (h + bias) — checked through a linear run.
  std::vector<float> lin(M * N), lin_bias(M * N);
  auto run = [&](std::vector<float>& d, std::vector<float>& bv, bool activation) {
    ref::grouped_gemm_fp8({.a = a.codes(), .a_scales = a.scales(), .b = b.codes(),
                           .b_scales = b.scales(), .offsets = test::i32(offsets, {E + 1}),
                           .d = test::f32(d, {M, activation ? N / 2 : N}),
                           .epilogue = activation ? GemmEpilogue::kActivation
                                                  : GemmEpilogue::kLinear,
                           .activation = Activation::kSwiGLU, .bias = test::f32(bv, {E, N})});
  };
  run(lin, zero, false);
  run(lin_bias, bias, false);
  for (int64_t r = offsets[0]; r < offsets[E]; ++r) {
    const int e = r < offsets[1] ? 0 : 1;
    for (int64_t i = 0; i < N; ++i)
      ASSERT_NEAR(lin_bias[r * N + i], lin[r * N + i] + bias[e * N + i],
                  1e-5 * (1 + std::abs(lin_bias[r * N + i])));
  }
  run(with, bias, true);
  const MoeConfig c{.hidden = K, .ffn = N / 2, .num_experts = E, .top_k = 1};
  std::vector<double> pre(N), out(N / 2);
  for (int64_t r = offsets[0]; r < offsets[E]; ++r) {
    for (int64_t i = 0; i < N; ++i) pre[i] = lin_bias[r * N + glu_interleaved_row(i, N / 2)];
    ref::activation_forward(c, pre.data(), out.data());
    for (int64_t i = 0; i < N / 2; ++i)
      ASSERT_NEAR(with[r * N / 2 + i], out[i], 1e-4 * (1 + std::abs(out[i]))) << r << " " << i;
  }
  test::expect_invalid(
      [&] {
        ref::grouped_gemm_fp8({.a = a.codes(), .a_scales = a.scales(), .b = b.codes(),
                               .b_scales = b.scales(), .offsets = test::i32(offsets, {E + 1}),
                               .d = test::f32(lin, {M, N}), .bias = test::f32(bias, {E, N / 2})});
      },
      "bias");
}

TEST(RefFp8WeightTranspose, ValidationNamesTheBadArgument) {
  const int64_t E = 2, N = 32, K = 48;
  std::vector<uint8_t> w(E * N * K), wt(E * N * K);
  std::vector<float> s(E, 1.0f), st(E, 1.0f);
  auto call = [&](std::initializer_list<int64_t> ws, std::initializer_list<int64_t> ss,
                  std::initializer_list<int64_t> ts, std::initializer_list<int64_t> sts,
                  uint8_t* wt_data) {
    ref::transpose_fp8_blockwise_weights(host(w.data(), DType::kFloat8E4M3, ws),
                                         test::f32(s, ss),
                                         host(wt_data, DType::kFloat8E4M3, ts),
                                         test::f32(st, sts));
  };
  EXPECT_NO_THROW(call({E, N, K}, {E, 1, 1}, {E, K, N}, {E, 1, 1}, wt.data()));
  test::expect_invalid([&] { call({E, N * K}, {E, 1, 1}, {E, K, N}, {E, 1, 1}, wt.data()); }, "w");
  test::expect_invalid([&] { call({E, N, 40}, {E, 1, 1}, {E, 40, N}, {E, 1, 1}, wt.data()); },
                       "w");  // K % 16
  test::expect_invalid([&] { call({E, 24, K}, {E, 1, 1}, {E, K, 24}, {E, 1, 1}, wt.data()); },
                       "w");  // N % 16
  test::expect_invalid([&] { call({E, N, K}, {E, 2, 1}, {E, K, N}, {E, 1, 1}, wt.data()); },
                       "w_scales");
  test::expect_invalid([&] { call({E, N, K}, {E, 1, 1}, {E, N, K}, {E, 1, 1}, wt.data()); },
                       "wt");
  test::expect_invalid([&] { call({E, N, K}, {E, 1, 1}, {E, K, N}, {E, 1, 1}, w.data()); },
                       "wt");  // in place
  test::expect_invalid([&] { call({E, N, K}, {E, 1, 1}, {E, K, N}, {E, 2}, wt.data()); },
                       "wt_scales");
  // The GPU entry point's rules reject host views.
  test::expect_invalid(
      [&] {
        validate_transpose_fp8_blockwise_weights(
            host(w.data(), DType::kFloat8E4M3, {E, N, K}), test::f32(s, {E, 1, 1}),
            host(wt.data(), DType::kFloat8E4M3, {E, K, N}), test::f32(st, {E, 1, 1}));
      },
      "w");
}

TEST(RefFc2DgradFp8, ValidationNamesTheBadArgument) {
  Fc2Problem pb(Activation::kSwiGLU, {3, 4}, 32, 16, 1);
  EXPECT_NO_THROW(ref::fc2_dgrad_fp8(pb.args()));
  auto with = [&](auto edit, const std::string& argument) {
    Fc2DgradFp8Args a = pb.args();
    edit(a);
    test::expect_invalid([&] { ref::fc2_dgrad_fp8(a); }, argument);
  };
  const int64_t m = pb.m;
  with([](auto& a) { a.activation = static_cast<Activation>(42); }, "activation");
  with([](auto& a) { a.w2t.dtype = DType::kBFloat16; }, "w2t");
  with([&](auto& a) { a.w2t = host(pb.w2t.q.data(), DType::kFloat8E4M3, {2, 16, 24}); }, "w2t");  // H % 16
  with([&](auto& a) { a.w2t_scales = test::f32(pb.w2t.s, {2, 1}); }, "w2t_scales");
  with([&](auto& a) { a.offsets = test::i32(pb.offsets, {2}); }, "offsets");
  with([&](auto& a) { a.dys = host(pb.dys.q.data(), DType::kFloat8E4M3, {m, 16}); }, "dys");
  with([&](auto& a) { a.dys_scales = test::f32(pb.dys.s, {1, m}); }, "dys_scales");
  with([&](auto& a) { a.pre = host(pb.pre.data(), DType::kBFloat16, {m, 16}); }, "pre");
  with([&](auto& a) { a.d_pre.dtype = DType::kFloat32; }, "d_pre");
  with([&](auto& a) { a.row_scale = test::f32(pb.p, {m - 1}); }, "row_scale");
  with([&](auto& a) { a.scaled_act = host(pb.scaled_act.data(), DType::kBFloat16, {m, 32}); },
       "scaled_act");
  with([&](auto& a) { a.d_row_scale = test::f32(pb.dp, {m - 1}); }, "d_row_scale");
  with([&](auto& a) { a.d_row_scale = {}; }, "b2");  // b2 without dp
  with([&](auto& a) { a.b2 = test::f32(pb.b2, {2, 16}); }, "b2");
  with([&](auto& a) { a.dys_bf16 = {}; }, "dys_bf16");
  with([&](auto& a) { a.b2 = {}; }, "dys_bf16");  // dys_bf16 without b2
  with([&](auto& a) {
    a.dys_bf16 = host(pb.dys_bf16.data(), DType::kBFloat16, {m, 16});
  }, "dys_bf16");
  // Outputs over an input or each other.
  with([](auto& a) { a.d_pre = a.pre; }, "d_pre");
  with([](auto& a) { a.scaled_act.data = a.dys_bf16.data; }, "scaled_act");
  with([](auto& a) { a.scaled_act.data = a.d_pre.data; }, "d_pre");
  with([](auto& a) { a.d_row_scale = a.row_scale; }, "d_row_scale");
  pb.offsets.back() = int32_t(m + 1);
  with([](auto&) {}, "offsets");
  pb.offsets.back() = int32_t(m - 1);
  // The GPU entry point's rules reject host views.
  test::expect_invalid([&] { validate_fc2_dgrad_fp8(pb.args()); }, "w2t");
}

}  // namespace
}  // namespace moefuse
