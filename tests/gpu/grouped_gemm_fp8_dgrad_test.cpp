// The FP8 dgrad's pieces on the GPU (moefuse/grouped_gemm_fp8_dgrad.h) against their CPU
// references on the same quantised operands:
//   - transpose_fp8_blockwise_weights: bit-exact with ref::transpose_fp8_blockwise_weights;
//   - the FC1 dgrad = grouped_gemm_fp8 on the GPU-transposed W1ᵀ (fp32 out, 1e-3 as the forward);
//   - grouped_gemm_fc2_dgrad_fp8 (dGLU epilogue, dp reduction) against ref::fc2_dgrad_fp8 for
//     every activation. Both round g to bf16 (the kernel's hand-off, and the reference modelling
//     it). Where the kernel's fp32 g (the tensor cores' reduced-precision accumulation inside a K
//     block: relative error δ, about 1e-4, below the FP8 GEMM test's fp32 bound 1e-3) and the
//     reference's straddle a bf16 rounding boundary, they round a bf16 step s apart (s ≈ 2^-7 ×
//     0.72 relative on average): a share δ / s of g's elements, sqrt(δ·s) in norm. Simulated on
//     the CPU (dp = <g, act>, F 200, SwiGLU of N(0, 1.5²)): dp 6.8e-4 at δ = 1e-4, 1.9e-3 at 1e-3
//     (1.6e-3 whatever δ were the reference's g left fp32). Tolerances: d_pre and scaled_act bf16,
//     rel-norm 1e-2 (one bf16 rounding each side on top); dp fp32, 5e-3 (the BF16 dgrad test's;
//     1e-3 held while both g were fp32). Outputs are NaN-poisoned: rows outside the experts must
//     keep the poison, rows inside must be written; failures name expert, row, column, max error.
#include <gtest/gtest.h>

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <vector>

#include "common/fp8_operands.h"
#include "common/margins.h"
#include "common/test_util.h"
#include "cuda/gemm/fp8/config.h"
#include "dispatch_test_util.h"
#include "moefuse/grouped_gemm.h"
#include "moefuse/grouped_gemm_fp8.h"
#include "moefuse/grouped_gemm_fp8_dgrad.h"
#include "ref/grouped_gemm_fp8.h"
#include "ref/grouped_gemm_fp8_dgrad.h"
#include "ref/quant.h"

namespace moefuse {
namespace {

using test::DeviceBuffer;

using test::bf16_to_float;
using test::float_to_bf16;
using test::Fp8Rows;
using test::Fp8Weight;
using test::host;
using test::offsets_of;
using test::widen;

int expert_of(const std::vector<int32_t>& offsets, int64_t r) {
  return int(std::upper_bound(offsets.begin(), offsets.end(), r) - offsets.begin()) - 1;
}

// A random weight [E, N, K] (entries ~ N(0, 1/K)) quantised 128x128.
Fp8Weight random_weight(int64_t e, int64_t n, int64_t k) {
  return Fp8Weight(test::random_normal(e * n * k, 1.0f / std::sqrt(float(k))), e, n, k);
}

// Max |got - want| over rows [first, end) of [*, cols], named by expert, row and column.
std::string worst(const std::vector<float>& got, const std::vector<float>& want, int64_t cols,
                  const std::vector<int32_t>& offsets) {
  const size_t first = offsets.front() * cols, count = offsets.back() * cols - first;
  const test::MaxDiff m = test::max_abs_diff(std::span(got).subspan(first, count),
                                             std::span(want).subspan(first, count));
  const int64_t at = int64_t(first + m.at);
  const double max_diff = m.diff;
  const int64_t r = at / cols;
  return "max |diff| " + std::to_string(max_diff) + " at row " + std::to_string(r) + " (expert " +
         std::to_string(expert_of(offsets, r)) + ") column " + std::to_string(at % cols) +
         ": got " + std::to_string(got[at]) + ", want " + std::to_string(want[at]);
}

// Poison kept outside [offsets[0], offsets[E]), nothing NaN inside; then the rel-norm error.
void check_rows(const std::vector<float>& got, const std::vector<float>& want, int64_t cols,
                const std::vector<int32_t>& offsets, double tolerance, const std::string& what) {
  SCOPED_TRACE(what);
  const int64_t rows = static_cast<int64_t>(got.size()) / cols;
  for (int64_t r = 0; r < rows; ++r) {
    const bool inside = r >= offsets.front() && r < offsets.back();
    for (int64_t c = 0; c < cols; ++c) {
      const bool nan = std::isnan(got[r * cols + c]);
      if (inside) ASSERT_FALSE(nan) << "row " << r << " (expert " << expert_of(offsets, r)
                                    << ") column " << c << " not written";
      else ASSERT_TRUE(nan) << "row " << r << " outside the experts was written";
    }
  }
  const int64_t b = offsets.front() * cols, e = offsets.back() * cols;
  const std::vector<float> g(got.begin() + b, got.begin() + e), w(want.begin() + b, want.begin() + e);
  const double error = test::rel_norm_error(g, w);
  test::record_margin(what, error, tolerance);
  EXPECT_LE(error, tolerance) << worst(got, want, cols, offsets);
}

void expect_transpose_bit_exact(int64_t e, int64_t n, int64_t k) {
  SCOPED_TRACE("E " + std::to_string(e) + " N " + std::to_string(n) + " K " + std::to_string(k) +
               " (seed " + std::to_string(test::seed()) + ")");
  Fp8Weight w = random_weight(e, n, k);
  const int64_t ng = fp8_scale_groups(n), kg = fp8_scale_groups(k);
  std::vector<uint8_t> wt(e * k * n);
  std::vector<float> st(e * kg * ng);
  ref::transpose_fp8_blockwise_weights(w.codes(), w.scales(),
                                       host(wt.data(), DType::kFloat8E4M3, {e, k, n}),
                                       host(st.data(), DType::kFloat32, {e, kg, ng}));
  DeviceBuffer<uint8_t> dw(w.q), dwt(wt.size());
  DeviceBuffer<float> ds(w.s), dst(st.size());
  dwt.poison(0x7F);
  dst.poison();
  transpose_fp8_blockwise_weights(dw.view(DType::kFloat8E4M3, {e, n, k}),
                                  ds.view(DType::kFloat32, {e, ng, kg}),
                                  dwt.view(DType::kFloat8E4M3, {e, k, n}),
                                  dst.view(DType::kFloat32, {e, kg, ng}), nullptr);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  const std::vector<uint8_t> got = dwt.download();
  for (size_t i = 0; i < got.size(); ++i)
    ASSERT_EQ(got[i], wt[i]) << "expert " << i / (k * n) << " row (k) " << (i / n) % k
                             << " column (n) " << i % n;
  const std::vector<float> got_s = dst.download();
  for (size_t i = 0; i < got_s.size(); ++i) ASSERT_EQ(got_s[i], st[i]) << "scale " << i;
}

TEST(Fp8WeightTranspose, BitExactWithTheReference) {
  MOEFUSE_REQUIRE_HOPPER();
  expect_transpose_bit_exact(3, 400, 208);   // partial 64-tiles and 128-blocks both ways
  expect_transpose_bit_exact(2, 4096, 7168);  // deepseek W1 shape
  expect_transpose_bit_exact(1, 16, 16);
}

// FC1 dgrad dxs = d_pre · W1 as grouped_gemm_fp8 on the GPU-transposed weight.
TEST(Fp8Dgrad, Fc1DgradOnTransposedWeights) {
  MOEFUSE_REQUIRE_HOPPER();
  const std::vector<int> counts = {0, 130, 1, 257, 0, 77};
  const std::vector<int32_t> offsets = offsets_of(counts, 5);
  const int64_t E = counts.size(), H = 272, FC1 = 400, M = offsets.back() + 9;
  Fp8Weight w1 = random_weight(E, FC1, H);  // [E, fc1, H]
  Fp8Rows dpre(test::random_normal(M * FC1), M, FC1);
  const int64_t hg = fp8_scale_groups(H), fg = fp8_scale_groups(FC1);
  std::vector<uint8_t> w1t(E * H * FC1);
  std::vector<float> w1t_s(E * hg * fg);
  ref::transpose_fp8_blockwise_weights(w1.codes(), w1.scales(),
                                       host(w1t.data(), DType::kFloat8E4M3, {E, H, FC1}),
                                       host(w1t_s.data(), DType::kFloat32, {E, hg, fg}));
  std::vector<int32_t> off = offsets;
  std::vector<float> want(M * H, std::nanf(""));
  ref::grouped_gemm_fp8({.a = dpre.codes(),
                         .a_scales = dpre.scales(),
                         .b = host(w1t.data(), DType::kFloat8E4M3, {E, H, FC1}),
                         .b_scales = host(w1t_s.data(), DType::kFloat32, {E, hg, fg}),
                         .offsets = host(off.data(), DType::kInt32, {E + 1}),
                         .d = host(want.data(), DType::kFloat32, {M, H})});

  DeviceBuffer<uint8_t> dw1(w1.q), dw1t(w1t.size()), da(dpre.q);
  DeviceBuffer<float> dw1s(w1.s), dw1ts(w1t_s.size()), das(dpre.s), dd(M * H);
  DeviceBuffer<int32_t> doff(offsets);
  dd.poison();
  transpose_fp8_blockwise_weights(dw1.view(DType::kFloat8E4M3, {E, FC1, H}),
                                  dw1s.view(DType::kFloat32, {E, fg, hg}),
                                  dw1t.view(DType::kFloat8E4M3, {E, H, FC1}),
                                  dw1ts.view(DType::kFloat32, {E, hg, fg}), nullptr);
  grouped_gemm_fp8({.a = da.view(DType::kFloat8E4M3, {M, FC1}),
                    .a_scales = das.view(DType::kFloat32, {fg, fp8_scale_rows(M)}),
                    .b = dw1t.view(DType::kFloat8E4M3, {E, H, FC1}),
                    .b_scales = dw1ts.view(DType::kFloat32, {E, hg, fg}),
                    .offsets = doff.view(DType::kInt32, {E + 1}),
                    .d = dd.view(DType::kFloat32, {M, H})},
                   nullptr);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  check_rows(dd.download(), want, H, offsets, 1e-3, "dxs");
}

struct Fc2Case {
  std::vector<int> counts;
  int base = 0, spare = 0;
  int64_t h = 256, f = 128;
  Activation act = Activation::kSwiGLU;
  bool row_scale = true, dp = true, bias = true, scaled_act = true;
};

void run_fc2(const Fc2Case& c, const std::string& name) {
  SCOPED_TRACE(name + " (seed " + std::to_string(test::seed()) + ")");
  const std::vector<int32_t> offsets = offsets_of(c.counts, c.base);
  const int64_t E = c.counts.size(), H = c.h, F = c.f, M = offsets.back() + c.spare;
  const int64_t fc1 = is_glu(c.act) ? 2 * F : F;
  std::vector<float> dys_f = test::random_normal(M * H);
  std::vector<uint16_t> dys_bf16(M * H), pre(M * fc1);
  for (int64_t i = 0; i < M * H; ++i) dys_bf16[i] = float_to_bf16(dys_f[i]);
  for (int64_t i = 0; i < M * H; ++i) dys_f[i] = bf16_to_float(dys_bf16[i]);
  {
    const std::vector<float> values = test::random_normal(M * fc1, 1.5f);
    for (int64_t i = 0; i < M * fc1; ++i) pre[i] = float_to_bf16(values[i]);
  }
  Fp8Rows dys(dys_f, M, H);
  Fp8Weight w2t = random_weight(E, F, H);
  std::vector<float> p = test::random_uniform(M, 0.1f, 1.0f), b2 = test::random_normal(E * H);
  std::vector<int32_t> off = offsets;
  const int64_t hg = fp8_scale_groups(H), fg = fp8_scale_groups(F);

  // Reference (host), outputs poisoned like the GPU's.
  std::vector<uint16_t> want_dpre(M * fc1, 0xFFFF), want_sa(M * F, 0xFFFF);
  std::vector<float> want_dp(M, std::nanf(""));
  const ClampedSwiGLUParams clamp{.alpha = 1.702f, .limit = 7.0f};
  Fc2DgradFp8Args ref_args{
      .dys = dys.codes(),
      .dys_scales = dys.scales(),
      .w2t = w2t.codes(),
      .w2t_scales = w2t.scales(),
      .offsets = host(off.data(), DType::kInt32, {E + 1}),
      .pre = host(pre.data(), DType::kBFloat16, {M, fc1}),
      .d_pre = host(want_dpre.data(), DType::kBFloat16, {M, fc1}),
      .activation = c.act,
      .clamped_swiglu = clamp};
  if (c.row_scale) ref_args.row_scale = host(p.data(), DType::kFloat32, {M});
  if (c.scaled_act) ref_args.scaled_act = host(want_sa.data(), DType::kBFloat16, {M, F});
  if (c.dp) ref_args.d_row_scale = host(want_dp.data(), DType::kFloat32, {M});
  if (c.dp && c.bias) {
    ref_args.b2 = host(b2.data(), DType::kFloat32, {E, H});
    ref_args.dys_bf16 = host(dys_bf16.data(), DType::kBFloat16, {M, H});
  }
  ref::fc2_dgrad_fp8(ref_args);

  DeviceBuffer<uint8_t> d_dys(dys.q), d_w2t(w2t.q);
  DeviceBuffer<float> d_dys_s(dys.s), d_w2t_s(w2t.s), d_p(p), d_b2(b2), d_dp(M),
      d_partial(M * fc2_dgrad_fp8_dp_blocks(F));
  DeviceBuffer<uint16_t> d_pre_in(pre), d_dpre(M * fc1), d_sa(M * F), d_dys_bf16(dys_bf16);
  DeviceBuffer<int32_t> d_off(offsets);
  d_dpre.poison();
  d_sa.poison();
  d_dp.poison();
  d_partial.poison();
  Fc2DgradFp8Args args{.dys = d_dys.view(DType::kFloat8E4M3, {M, H}),
                       .dys_scales = d_dys_s.view(DType::kFloat32, {hg, fp8_scale_rows(M)}),
                       .w2t = d_w2t.view(DType::kFloat8E4M3, {E, F, H}),
                       .w2t_scales = d_w2t_s.view(DType::kFloat32, {E, fg, hg}),
                       .offsets = d_off.view(DType::kInt32, {E + 1}),
                       .pre = d_pre_in.view(DType::kBFloat16, {M, fc1}),
                       .d_pre = d_dpre.view(DType::kBFloat16, {M, fc1}),
                       .activation = c.act,
                       .clamped_swiglu = clamp};
  if (c.row_scale) args.row_scale = d_p.view(DType::kFloat32, {M});
  if (c.scaled_act) args.scaled_act = d_sa.view(DType::kBFloat16, {M, F});
  if (c.dp) args.d_row_scale = d_dp.view(DType::kFloat32, {M});
  if (c.dp && c.bias) {
    args.b2 = d_b2.view(DType::kFloat32, {E, H});
    args.dys_bf16 = d_dys_bf16.view(DType::kBFloat16, {M, H});
  }
  grouped_gemm_fc2_dgrad_fp8(args, d_partial.view(DType::kFloat32, {M, fc2_dgrad_fp8_dp_blocks(F)}),
                             nullptr);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  check_rows(widen(d_dpre.download()), widen(want_dpre), fc1, offsets, 1e-2, "d_pre");
  if (c.scaled_act) check_rows(widen(d_sa.download()), widen(want_sa), F, offsets, 1e-2, "scaled_act");
  if (c.dp) check_rows(d_dp.download(), want_dp, 1, offsets, 5e-3, "dp");
}

// H = 208 runs the dGLU kernel with seven epilogue warps, 3200 the one with three.
static_assert(208 <= gemm::fp8::kSevenWarpsMaxK && 3200 > gemm::fp8::kSevenWarpsMaxK,
              "Fc2DgradEveryActivation's two H must straddle the epilogue shapes' boundary");

TEST(Fp8Dgrad, Fc2DgradEveryActivation) {
  MOEFUSE_REQUIRE_HOPPER();
  for (Activation act : {Activation::kSwiGLU, Activation::kGeGLU, Activation::kReGLU,
                         Activation::kClampedSwiGLU, Activation::kSquaredReLU})
    // F = 200 (a 72-column tail past 128), H = 208 (short last K group) or 3200 (both kernel
    // shapes), ragged experts with empty ones, rows before and after the experts.
    for (int64_t h : {208, 3200})
      run_fc2({.counts = {0, 1, 127, 129, 300, 0, 64}, .base = 3, .spare = 70, .h = h, .f = 200,
               .act = act},
              std::string(activation_name(act)) + ", H " + std::to_string(h));
}

TEST(Fp8Dgrad, Fc2DgradOptionalOutputsAbsent) {
  MOEFUSE_REQUIRE_HOPPER();
  run_fc2({.counts = {50, 200}, .row_scale = false, .dp = false, .bias = false,
           .scaled_act = false},
          "d_pre only, p = 1");
  run_fc2({.counts = {50, 200}, .bias = false}, "dp without b2");
}

// The deepseek-v3 slice: H 7168, F 2048, SwiGLU, skewed routing (2, 0 and 5 full m-blocks and
// a partial, an empty expert). The rows are few because the fp64 reference dominates the test's
// time: 2,240 rows took 79 s on the H200 machine (run 18), the suite's second-longest test.
TEST(Fp8Dgrad, Fc2DgradDeepSeekShape) {
  MOEFUSE_REQUIRE_HOPPER();
  run_fc2({.counts = {300, 40, 0, 650}, .spare = 3, .h = 7168, .f = 2048, .bias = false},
          "deepseek fc2 dgrad");
}

TEST(Fp8Dgrad, RejectsHostTensors) {
  // Validation runs before any CUDA call: this runs without a GPU too.
  std::vector<uint8_t> w(2 * 16 * 16), wt(2 * 16 * 16);
  std::vector<float> s(2), st(2);
  try {
    transpose_fp8_blockwise_weights(host(w.data(), DType::kFloat8E4M3, {2, 16, 16}),
                                    host(s.data(), DType::kFloat32, {2, 1, 1}),
                                    host(wt.data(), DType::kFloat8E4M3, {2, 16, 16}),
                                    host(st.data(), DType::kFloat32, {2, 1, 1}), nullptr);
    FAIL() << "accepted host tensors";
  } catch (const InvalidArgument& e) {
    EXPECT_EQ(e.argument(), "w") << e.what();
  }
}

}  // namespace
}  // namespace moefuse
