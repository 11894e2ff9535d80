// The FP8 grouped GEMM's CPU reference (src/ref/grouped_gemm_fp8.h) against an independent path:
// the quant reference's own dequantisers (row-major scales, fp32), the GLU de-interleave, the
// fp64 matmul of ref/gemm.h and activation_forward. Also the K-major scale transpose and every
// validation error of the FP8 GEMM's arguments.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "common/fp8_operands.h"
#include "common/test_util.h"
#include "moefuse/grouped_gemm_fp8.h"
#include "ref/expert_mlp.h"
#include "ref/gemm.h"
#include "ref/grouped_gemm_fp8.h"
#include "ref/quant.h"
#include "ref_test_helpers.h"

namespace moefuse {
namespace {

using test::bf16_to_float;

struct Case {
  std::vector<int> counts;
  int row_base = 0, spare_rows = 0;
  int64_t n = 64, k = 64;
  bool activation = false;
  Activation act = Activation::kSwiGLU;
  bool row_scale = false, fp32_out = true;
  bool pre = false;  // the optional pre-activation output (kActivation, bf16 d)
};

// Quantised operands for a case, built from fresh random fp32 data with the quant reference.
class Fixture {
 public:
  explicit Fixture(const Case& c) : c_(c) {
    experts_ = static_cast<int64_t>(c.counts.size());
    offsets_ = test::offsets_of(c.counts, c.row_base);
    m_cap_ = offsets_[experts_] + c.spare_rows;
    glu_ = c.activation && is_glu(c.act);
    n_out_ = glu_ ? c.n / 2 : c.n;
    const int64_t k = c.k, n = c.n, kg = fp8_scale_groups(k), ng = fp8_scale_groups(n);

    // Activations: per-row magnitudes spread over decades, so that the 1x128 scales differ.
    std::vector<float> x = test::random_normal(m_cap_ * k);
    const std::vector<float> row_mag = test::random_uniform(m_cap_, -3.0f, 3.0f);
    for (int64_t r = 0; r < m_cap_; ++r)
      for (int64_t j = 0; j < k; ++j) x[r * k + j] *= std::pow(10.0f, row_mag[r]);
    a_.resize(m_cap_ * k);
    std::vector<float> a_scales_rows(m_cap_ * kg);
    ref::quantize_fp8_blockwise_1x128(test::f32(x, {m_cap_, k}), u8(a_, {m_cap_, k}),
                                      test::f32(a_scales_rows, {m_cap_, kg}));
    a_scales_.resize(kg * fp8_scale_rows(m_cap_));
    transpose_fp8_activation_scales(test::f32(a_scales_rows, {m_cap_, kg}),
                                    test::f32(a_scales_, {kg, fp8_scale_rows(m_cap_)}));
    a_deq_.resize(m_cap_ * k);
    ref::dequantize_fp8_blockwise_1x128(u8(a_, {m_cap_, k}), test::f32(a_scales_rows, {m_cap_, kg}),
                                        test::f32(a_deq_, {m_cap_, k}));

    // Weights in the reference [gate; up] order, interleaved for GLU, then quantised.
    std::vector<float> w = test::random_normal(experts_ * n * k, 1.0f / std::sqrt(float(k)));
    std::vector<float> w_kernel = w;
    if (glu_)
      interleave_glu_weight(test::f32(w, {experts_, n, k}), test::f32(w_kernel, {experts_, n, k}));
    b_.resize(experts_ * n * k);
    b_scales_.resize(experts_ * ng * kg);
    ref::quantize_fp8_blockwise_128x128(test::f32(w_kernel, {experts_, n, k}),
                                        u8(b_, {experts_, n, k}),
                                        test::f32(b_scales_, {experts_, ng, kg}));
    std::vector<float> w_deq_kernel(experts_ * n * k);
    ref::dequantize_fp8_blockwise_128x128(u8(b_, {experts_, n, k}),
                                          test::f32(b_scales_, {experts_, ng, kg}),
                                          test::f32(w_deq_kernel, {experts_, n, k}));
    w_deq_ = w_deq_kernel;
    if (glu_)
      deinterleave_glu_weight(test::f32(w_deq_kernel, {experts_, n, k}),
                              test::f32(w_deq_, {experts_, n, k}));
    scale_ = test::random_uniform(m_cap_, 0.1f, 1.0f);
    const size_t d_bytes = m_cap_ * n_out_ * (c.fp32_out ? 4 : 2);
    d_.assign(d_bytes, 0xFF);  // NaN in bf16 and fp32
    if (c.pre) pre_.assign(m_cap_ * n * 2, 0xFF);
  }

  GroupedGemmFp8Args args() {
    const int64_t kg = fp8_scale_groups(c_.k);
    GroupedGemmFp8Args g{
        .a = u8(a_, {m_cap_, c_.k}),
        .a_scales = test::f32(a_scales_, {kg, fp8_scale_rows(m_cap_)}),
        .b = u8(b_, {experts_, c_.n, c_.k}),
        .b_scales = test::f32(b_scales_, {experts_, fp8_scale_groups(c_.n), kg}),
        .offsets = test::i32(offsets_, {experts_ + 1}),
        .d = TensorView::contiguous(d_.data(), c_.fp32_out ? DType::kFloat32 : DType::kBFloat16,
                                    {m_cap_, n_out_}),
        .epilogue = c_.activation ? GemmEpilogue::kActivation : GemmEpilogue::kLinear,
        .activation = c_.act};
    if (c_.row_scale) g.row_scale = test::f32(scale_, {m_cap_});
    if (c_.pre)
      g.pre_activation = TensorView::contiguous(pre_.data(), DType::kBFloat16, {m_cap_, c_.n});
    return g;
  }

  // h [M_cap, N] from the dequantised operands in the kernel's column order (GLU interleaved:
  // reference column j sits at glu_interleaved_row(j, N / 2)); NaN outside the experts.
  std::vector<double> expected_h() const {
    std::vector<double> h(m_cap_ * c_.n, std::numeric_limits<double>::quiet_NaN());
    for (int64_t e = 0; e < experts_; ++e) {
      const int64_t r0 = offsets_[e], rows = offsets_[e + 1] - offsets_[e];
      std::vector<double> ref_h(rows * c_.n);
      ref::matmul(rows, c_.n, c_.k, ref::rows_of(a_deq_.data() + r0 * c_.k, c_.k),
                  ref::rows_of(w_deq_.data() + e * c_.n * c_.k, c_.k).transposed(),
                  ref_h.data(), false);
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t j = 0; j < c_.n; ++j)
          h[(r0 + r) * c_.n + (glu_ ? glu_interleaved_row(j, c_.n / 2) : j)] =
              ref_h[r * c_.n + j];
    }
    return h;
  }

  std::vector<float> got_pre() const {
    std::vector<float> v(pre_.size() / 2);
    for (size_t i = 0; i < v.size(); ++i) {
      uint16_t h;
      std::memcpy(&h, &pre_[2 * i], 2);
      v[i] = bf16_to_float(h);
    }
    return v;
  }

  // D from the dequantised fp32 operands: fp64 matmul per expert, activation, row scale.
  std::vector<double> expected() const {
    std::vector<double> want(m_cap_ * n_out_, std::numeric_limits<double>::quiet_NaN());
    const MoeConfig config{.hidden = c_.k, .ffn = n_out_, .num_experts = experts_, .top_k = 1,
                           .activation = c_.act};
    for (int64_t e = 0; e < experts_; ++e) {
      const int64_t r0 = offsets_[e], rows = offsets_[e + 1] - offsets_[e];
      std::vector<double> h(rows * c_.n);
      ref::matmul(rows, c_.n, c_.k, ref::rows_of(a_deq_.data() + r0 * c_.k, c_.k),
                  ref::rows_of(w_deq_.data() + e * c_.n * c_.k, c_.k).transposed(), h.data(),
                  false);
      // With bf16 D the epilogue reads h rounded to bf16 (ref/grouped_gemm_fp8.h). fp64 → fp32
      // → bf16 rounds as fp64 → bf16 but for ties the fp32 step makes: rare, and one bf16 step.
      if (!c_.fp32_out)
        for (double& v : h) v = bf16_to_float(test::float_to_bf16(static_cast<float>(v)));
      for (int64_t r = 0; r < rows; ++r) {
        double* out = &want[(r0 + r) * n_out_];
        if (c_.activation) ref::activation_forward(config, &h[r * c_.n], out);
        else std::copy(&h[r * c_.n], &h[(r + 1) * c_.n], out);
        for (int64_t i = 0; i < n_out_; ++i) out[i] *= c_.row_scale ? scale_[r0 + r] : 1.0;
      }
    }
    return want;
  }

  // D as floats (bf16 widened).
  std::vector<float> got() const {
    std::vector<float> v(m_cap_ * n_out_);
    if (c_.fp32_out) {
      std::memcpy(v.data(), d_.data(), d_.size());
    } else {
      for (size_t i = 0; i < v.size(); ++i) {
        uint16_t h;
        std::memcpy(&h, &d_[2 * i], 2);
        v[i] = bf16_to_float(h);
      }
    }
    return v;
  }

  int64_t m_cap() const { return m_cap_; }
  int64_t n_out() const { return n_out_; }
  const std::vector<int32_t>& offsets() const { return offsets_; }

 private:
  static TensorView u8(std::vector<uint8_t>& v, std::initializer_list<int64_t> shape) {
    return TensorView::contiguous(v.data(), DType::kFloat8E4M3, shape);
  }

  Case c_;
  int64_t experts_ = 0, m_cap_ = 0, n_out_ = 0;
  bool glu_ = false;
  std::vector<int32_t> offsets_;
  std::vector<uint8_t> a_, b_, d_, pre_;
  std::vector<float> a_scales_, b_scales_, a_deq_, w_deq_, scale_;
};

// Rows inside the experts: rel-norm error against the independent path; rows outside: poison.
void check_case(const Case& c, const std::string& name) {
  SCOPED_TRACE(name + " (seed " + std::to_string(test::seed()) + ")");
  Fixture f(c);
  ref::grouped_gemm_fp8(f.args());
  const std::vector<float> got = f.got();
  const std::vector<double> want = f.expected();
  const int64_t first = f.offsets().front(), end = f.offsets().back(), n_out = f.n_out();
  for (int64_t r = 0; r < f.m_cap(); ++r) {
    if (r >= first && r < end) continue;
    for (int64_t i = 0; i < n_out; ++i)
      ASSERT_TRUE(std::isnan(got[r * n_out + i])) << "row " << r << " outside the experts written";
  }
  const std::span<const float> g(got.data() + first * n_out, (end - first) * n_out);
  const std::span<const double> w(want.data() + first * n_out, (end - first) * n_out);
  // fp32: only the fp32 rounding of the dequantised operands (2^-24) and of D differ. bf16: D's
  // rounding, 2^-9 relative at most per element.
  EXPECT_LE(test::rel_norm_error(g, w), c.fp32_out ? 1e-6 : 4e-3);
  if (!c.pre) return;
  // pre = h rounded once to bf16 (fp64 → fp32 → bf16: within 2^-9 relative of h), against this
  // path's h, which differs by the fp32 rounding of its dequantised operands: up to ~2^-20 of the
  // row's largest |h| where an element cancels (rows span 10^±3). Rows outside keep their poison.
  const std::vector<float> pre = f.got_pre();
  const std::vector<double> h = f.expected_h();
  for (int64_t row = 0; row < f.m_cap(); ++row) {
    const double* hr = &h[row * c.n];
    const float* pr = &pre[row * c.n];
    if (row < first || row >= end) {
      for (int64_t j = 0; j < c.n; ++j)
        ASSERT_TRUE(std::isnan(pr[j])) << "pre row " << row << " outside the experts written";
      continue;
    }
    double row_max = 0;
    for (int64_t j = 0; j < c.n; ++j) row_max = std::max(row_max, std::abs(hr[j]));
    for (int64_t j = 0; j < c.n; ++j)
      ASSERT_LE(std::abs(pr[j] - hr[j]), std::ldexp(std::abs(hr[j]), -8) + std::ldexp(row_max, -16))
          << "pre row " << row << " column " << j << ": got " << pr[j] << ", h " << hr[j];
  }
}

// Ragged experts including empty ones; K and N not multiples of 128; M_cap not a multiple of 4.
const std::vector<int> kRagged = {0, 5, 130, 1, 0, 37};

TEST(RefGroupedGemmFp8, LinearMatchesDequantisedProduct) {
  check_case({.counts = kRagged, .row_base = 2, .spare_rows = 3, .n = 136, .k = 208,
              .row_scale = true},
             "linear fp32, row scale");
  check_case({.counts = kRagged, .spare_rows = 1, .n = 24, .k = 144, .fp32_out = false},
             "linear bf16");
}

TEST(RefGroupedGemmFp8, EveryActivationMatchesDequantisedProduct) {
  for (Activation act : {Activation::kSwiGLU, Activation::kGeGLU, Activation::kReGLU,
                         Activation::kClampedSwiGLU, Activation::kSquaredReLU}) {
    for (bool fp32 : {true, false})
      check_case({.counts = kRagged, .row_base = 1, .spare_rows = 2, .n = 272, .k = 176,
                  .activation = true, .act = act, .row_scale = true, .fp32_out = fp32},
                 std::string(activation_name(act)) + (fp32 ? " fp32" : " bf16"));
  }
}

// The optional pre-activation: bf16(h) in the kernel's interleaved GLU column order.
TEST(RefGroupedGemmFp8, PreActivationIsHRoundedToBf16InKernelOrder) {
  for (Activation act : {Activation::kSwiGLU, Activation::kSquaredReLU})
    check_case({.counts = kRagged, .row_base = 1, .spare_rows = 2, .n = 272, .k = 176,
                .activation = true, .act = act, .row_scale = true, .fp32_out = false,
                .pre = true},
               std::string(activation_name(act)) + " pre");
}

// E4M3 D: the bf16 D of the same arguments, quantised by the 1x128 reference row by row, its
// scales K-major; rows outside the experts and the scale padding untouched.
TEST(RefGroupedGemmFp8, E4m3OutputIsTheBf16OutputQuantised) {
  for (Activation act : {Activation::kSwiGLU, Activation::kSquaredReLU}) {
    SCOPED_TRACE(activation_name(act));
    // N_out 144: a short second scale group.
    Fixture f({.counts = kRagged, .row_base = 1, .spare_rows = 2,
               .n = is_glu(act) ? 288 : 144, .k = 176, .activation = true, .act = act,
               .row_scale = true, .fp32_out = false});
    ref::grouped_gemm_fp8(f.args());
    const std::vector<float> bf16 = f.got();
    const int64_t m = f.m_cap(), n_out = f.n_out(), groups = fp8_scale_groups(n_out);
    const int64_t pitch = fp8_scale_rows(m);
    std::vector<uint8_t> codes(m * n_out, 0xFF);
    std::vector<float> scales(groups * pitch, std::numeric_limits<float>::quiet_NaN());
    GroupedGemmFp8Args g = f.args();
    g.d = TensorView::contiguous(codes.data(), DType::kFloat8E4M3, {m, n_out});
    g.d_scales = test::f32(scales, {groups, pitch});
    ref::grouped_gemm_fp8(g);

    test::expect_rows_quantised_1x128(bf16, codes, scales, m, n_out, f.offsets().front(),
                                      f.offsets().back(), [](int64_t r, int64_t g) {
                                        return "row " + std::to_string(r) + " group " +
                                               std::to_string(g);
                                      });
  }
}

TEST(RefGroupedGemmFp8, OneExpertWithAllRowsAndNoRowsAtAll) {
  check_case({.counts = {0, 0, 70, 0}, .n = 32, .k = 256, .activation = true}, "one hot expert");
  check_case({.counts = {0, 0, 0}, .row_base = 3, .spare_rows = 6, .n = 16, .k = 32},
             "no rows at all");
}

TEST(RefGroupedGemmFp8, ScaleTransposeIsKMajorWithPaddedRows) {
  const int64_t m = 6, kg = 3, pitch = fp8_scale_rows(m);
  ASSERT_EQ(pitch, 8);
  std::vector<float> src = test::random_uniform(m * kg, 0.5f, 2.0f), dst(kg * pitch, -1.0f);
  transpose_fp8_activation_scales(test::f32(src, {m, kg}), test::f32(dst, {kg, pitch}));
  for (int64_t g = 0; g < kg; ++g)
    for (int64_t r = 0; r < pitch; ++r)
      EXPECT_EQ(dst[g * pitch + r], r < m ? src[r * kg + g] : 1.0f) << "group " << g << " row " << r;
  EXPECT_EQ(fp8_scale_rows(0), 0);
  EXPECT_EQ(fp8_scale_rows(8), 8);
  EXPECT_EQ(fp8_scale_groups(128), 1);
  EXPECT_EQ(fp8_scale_groups(129), 2);
}

TEST(RefGroupedGemmFp8, ScaleTransposeRejectsBadViews) {
  std::vector<float> src(12), dst(12);
  test::expect_invalid([&] { transpose_fp8_activation_scales(test::f32(src, {12}), test::f32(dst, {3, 4})); },
                       "src");
  test::expect_invalid([&] { transpose_fp8_activation_scales(test::f32(src, {4, 3}), test::f32(dst, {4, 3})); },
                       "dst");
  test::expect_invalid([&] { transpose_fp8_activation_scales(test::f32(src, {4, 3}), test::f32(src, {3, 4})); },
                       "dst");
}

// Validation: a valid FC1 set of host views, then one bad argument at a time.
constexpr int64_t kE = 3, kM = 10, kN = 48, kK = 160;

struct ValidArgs {
  std::vector<uint8_t> a = std::vector<uint8_t>(kM * kK), b = std::vector<uint8_t>(kE * kN * kK);
  std::vector<float> a_scales = std::vector<float>(2 * fp8_scale_rows(kM), 1.0f),
                     b_scales = std::vector<float>(kE * 1 * 2, 1.0f),
                     d = std::vector<float>(kM * kN), row_scale = std::vector<float>(kM, 1.0f);
  std::vector<int32_t> offsets = {0, 3, 3, 9};

  GroupedGemmFp8Args fc1() {
    return {.a = TensorView::contiguous(a.data(), DType::kFloat8E4M3, {kM, kK}),
            .a_scales = test::f32(a_scales, {2, fp8_scale_rows(kM)}),
            .b = TensorView::contiguous(b.data(), DType::kFloat8E4M3, {kE, kN, kK}),
            .b_scales = test::f32(b_scales, {kE, 1, 2}),
            .offsets = test::i32(offsets, {kE + 1}),
            .d = test::f32(d, {kM, kN / 2}),
            .epilogue = GemmEpilogue::kActivation,
            .activation = Activation::kSwiGLU,
            .row_scale = test::f32(row_scale, {kM})};
  }
};

void expect_rejected(const GroupedGemmFp8Args& args, const std::string& argument) {
  test::expect_invalid([&] { ref::grouped_gemm_fp8(args); }, argument);
}

TEST(RefGroupedGemmFp8, ValidationNamesTheBadArgument) {
  ValidArgs v;
  EXPECT_NO_THROW(ref::grouped_gemm_fp8(v.fc1()));
  {
    GroupedGemmFp8Args fc2 = v.fc1();
    fc2.epilogue = GemmEpilogue::kLinear;
    fc2.d = test::f32(v.d, {kM, kN});
    EXPECT_NO_THROW(ref::grouped_gemm_fp8(fc2));
  }
  auto with = [&](auto edit, const std::string& argument) {
    GroupedGemmFp8Args args = v.fc1();
    edit(args);
    expect_rejected(args, argument);
  };
  with([](auto& g) { g.epilogue = static_cast<GemmEpilogue>(7); }, "epilogue");
  with([](auto& g) { g.activation = static_cast<Activation>(42); }, "activation");
  with([&](auto& g) { g.b = test::f32(v.d, {kE, kN}); }, "b");                     // rank
  with([&](auto& g) { g.b.dtype = DType::kFloat8E5M2; }, "b");                     // dtype
  with([&](auto& g) {                                                                // K % 16
    g.b = TensorView::contiguous(v.b.data(), DType::kFloat8E4M3, {kE, kN, 40});
  }, "b");
  with([&](auto& g) {                                                                // GLU N % 16
    g.b = TensorView::contiguous(v.b.data(), DType::kFloat8E4M3, {kE, 40, kK});
  }, "b");
  with([&](auto& g) { g.b_scales = test::f32(v.b_scales, {kE, 2, 1}); }, "b_scales");
  with([&](auto& g) { g.offsets = test::i32(v.offsets, {kE}); }, "offsets");
  for (const std::vector<int32_t>& bad : {std::vector<int32_t>{0, 5, 4, 9},    // decreasing
                                          std::vector<int32_t>{0, 3, 3, 11}}) {  // past M_cap
    v.offsets = bad;
    expect_rejected(v.fc1(), "offsets");
  }
  v.offsets = {0, 3, 3, 9};
  with([&](auto& g) { g.a.dtype = DType::kBFloat16; }, "a");
  with([&](auto& g) { g.a = TensorView::contiguous(v.a.data(), DType::kFloat8E4M3, {kM / 2, 2 * kK}); },
       "a");
  // Row-major scales instead of K-major, and K-major without the 4-row padding.
  with([&](auto& g) { g.a_scales = test::f32(v.a_scales, {kM, 2}); }, "a_scales");
  with([&](auto& g) { g.a_scales = test::f32(v.a_scales, {2, kM}); }, "a_scales");
  with([&](auto& g) { g.d = test::f32(v.d, {kM, kN}); }, "d");  // GLU halves N
  with([&](auto& g) { g.d.dtype = DType::kFloat16; }, "d");
  with([&](auto& g) { g.row_scale = test::f32(v.row_scale, {kM - 1}); }, "row_scale");
  with([&](auto& g) { g.a.device = Device::kCuda; }, "a");
  // The pre-activation: bf16 d only (fp32 d does not stage bf16 h), kActivation only, [M_cap, N].
  std::vector<uint16_t> pre(kM * kN), d_bf16(kM * kN / 2);
  auto bf16_view = [](std::vector<uint16_t>& v, std::initializer_list<int64_t> shape) {
    return TensorView::contiguous(v.data(), DType::kBFloat16, shape);
  };
  auto with_pre = [&](GroupedGemmFp8Args g) {
    g.d = bf16_view(d_bf16, {kM, kN / 2});
    g.pre_activation = bf16_view(pre, {kM, kN});
    return g;
  };
  EXPECT_NO_THROW(ref::grouped_gemm_fp8(with_pre(v.fc1())));
  with([&](auto& g) { g = with_pre(g), g.d = test::f32(v.d, {kM, kN / 2}); }, "pre_activation");
  with([&](auto& g) {
    g = with_pre(g), g.epilogue = GemmEpilogue::kLinear, g.d = bf16_view(pre, {kM, kN});
  }, "pre_activation");
  with([&](auto& g) { g = with_pre(g), g.pre_activation = bf16_view(pre, {kM, kN / 2}); },
       "pre_activation");
  with([&](auto& g) { g = with_pre(g), g.pre_activation.dtype = DType::kFloat16; },
       "pre_activation");
  // E4M3 d: with its K-major scales [ceil(N_out/128), fp8_scale_rows(M_cap)]; N_out % 16 == 0
  // (the GLU's 24 is not); d_scales only with e4m3 d.
  std::vector<uint8_t> codes(kM * kN);
  std::vector<float> d_scales(fp8_scale_rows(kM));
  auto e4m3 = [&](GroupedGemmFp8Args g) {
    g.epilogue = GemmEpilogue::kLinear;
    g.d = TensorView::contiguous(codes.data(), DType::kFloat8E4M3, {kM, kN});
    g.d_scales = test::f32(d_scales, {1, fp8_scale_rows(kM)});
    return g;
  };
  EXPECT_NO_THROW(ref::grouped_gemm_fp8(e4m3(v.fc1())));
  with([&](auto& g) { g = e4m3(g), g.d_scales = TensorView{}; }, "d_scales");
  with([&](auto& g) { g = e4m3(g), g.d_scales = test::f32(d_scales, {1, kM}); }, "d_scales");
  with([&](auto& g) { g.d_scales = test::f32(d_scales, {1, fp8_scale_rows(kM)}); }, "d_scales");
  with([&](auto& g) { g = e4m3(g), g.d_scales.data = g.a.data; }, "d_scales");  // over an input
  with([&](auto& g) {
    g = e4m3(g), g.epilogue = GemmEpilogue::kActivation;
    g.d = TensorView::contiguous(codes.data(), DType::kFloat8E4M3, {kM, kN / 2});
  }, "d");
  // The GPU entry point's rules reject host views, naming the first one checked.
  test::expect_invalid([&] { validate_grouped_gemm_fp8(v.fc1()); }, "b");
}

}  // namespace
}  // namespace moefuse
