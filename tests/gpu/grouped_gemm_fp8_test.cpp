// The FP8 grouped GEMM (DeepSeek-V3 recipe) on the GPU against the fp64 CPU reference of
// src/ref/grouped_gemm_fp8.h on the same quantised operands.
//
// Operands: fresh random fp32 data quantised by the quant reference (bit-identical to the GPU
// quantisers), activation scales transposed to the K-major layout. The reference runs on every
// row for small problems, else on every expert's first and last row plus a random sample
// (gathered into a compact problem with the same weights).
//
// Tolerances (relative norm): fp32 output 1e-3, DeepGEMM's bar for its FP8 GEMMs (the tensor
// cores' reduced-precision accumulation inside one 128-wide K block, promoted in fp32 after it).
// bf16 output: its rounding, about 2^-9 per element, so 5e-3 as in the BF16 kernel's test.
// Rows outside [offsets[0], offsets[E]) must keep their poison bit for bit; every row inside
// must be written (no NaN left).
// The optional pre-activation (bf16(h + bias), interleaved GLU columns): bit for bit the bf16 D of
// the same GEMM with the linear epilogue (the same accumulation and rounding: what makes the
// layer's cached pre and its recompute agree), and against the reference's bf16(h + bias) within
// one bf16 step plus the fp32 accumulation's slack.
// E4M3 output (FC1's act for FC2): codes and K-major scales bit for bit the 1x128 quantiser's
// reference of the bf16 D the same call writes (run again with bf16 d), for rows inside the
// experts; everything else keeps its poison.
#include <gtest/gtest.h>

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <numeric>
#include <string>
#include <vector>

#include "common/fp8_operands.h"
#include "common/margins.h"
#include "cuda/gemm/fp8/config.h"
#include "common/test_util.h"
#include "dispatch_test_util.h"
#include "moefuse/grouped_gemm_fp8.h"
#include "ref/grouped_gemm_fp8.h"
#include "ref/quant.h"

namespace moefuse {
namespace {

using test::DeviceBuffer;

using test::bf16_to_float;
using test::host;
using test::uniform_counts;

struct Case {
  std::vector<int> counts;
  int row_base = 0, spare_rows = 0;
  int64_t n = 256, k = 256;
  bool activation = false;
  Activation act = Activation::kSwiGLU;
  bool row_scale = false, fp32_out = true;
  bool bias = false;  // per-expert fp32 bias [E, N] before the activation
  bool pre = false;   // the pre-activation output [M_cap, N] bf16 (activation, bf16 d)
  bool e4m3_out = false;  // d e4m3 with 1x128 scales (fp32_out false)
};

// Host operands (quantised), their device copies, the kernel run and the comparison.
class Runner {
 public:
  explicit Runner(const Case& c) : c_(c) {
    experts_ = static_cast<int64_t>(c.counts.size());
    offsets_ = test::offsets_of(c.counts, c.row_base);
    m_cap_ = offsets_[experts_] + c.spare_rows;
    glu_ = c.activation && is_glu(c.act);
    n_out_ = glu_ ? c.n / 2 : c.n;
    kg_ = fp8_scale_groups(c.k);
    const int64_t n = c.n, k = c.k, ng = fp8_scale_groups(n);

    std::vector<float> x = test::random_normal(m_cap_ * k);
    a_.resize(m_cap_ * k);
    std::vector<float> a_scales_rows(m_cap_ * kg_);
    ref::quantize_fp8_blockwise_1x128(host(x.data(), DType::kFloat32, {m_cap_, k}),
                                      host(a_.data(), DType::kFloat8E4M3, {m_cap_, k}),
                                      host(a_scales_rows.data(), DType::kFloat32, {m_cap_, kg_}));
    a_scales_.resize(kg_ * fp8_scale_rows(m_cap_));
    transpose_fp8_activation_scales(
        host(a_scales_rows.data(), DType::kFloat32, {m_cap_, kg_}),
        host(a_scales_.data(), DType::kFloat32, {kg_, fp8_scale_rows(m_cap_)}));

    // GLU weights: the layout the kernel reads is interleaved, then quantised; the reference
    // reads the same quantised interleaved weight, so the raw draw can be used as is.
    std::vector<float> w = test::random_normal(experts_ * n * k, 1.0f / std::sqrt(float(k)));
    b_.resize(experts_ * n * k);
    b_scales_.resize(experts_ * ng * kg_);
    ref::quantize_fp8_blockwise_128x128(
        host(w.data(), DType::kFloat32, {experts_, n, k}),
        host(b_.data(), DType::kFloat8E4M3, {experts_, n, k}),
        host(b_scales_.data(), DType::kFloat32, {experts_, ng, kg_}));
    scale_ = test::random_uniform(m_cap_, 0.1f, 1.0f);
    bias_ = test::random_normal(experts_ * n);

    a_dev_ = std::make_unique<DeviceBuffer<uint8_t>>(a_);
    a_scales_dev_ = std::make_unique<DeviceBuffer<float>>(a_scales_);
    b_dev_ = std::make_unique<DeviceBuffer<uint8_t>>(b_);
    b_scales_dev_ = std::make_unique<DeviceBuffer<float>>(b_scales_);
    offsets_dev_ = std::make_unique<DeviceBuffer<int32_t>>(offsets_);
    scale_dev_ = std::make_unique<DeviceBuffer<float>>(scale_);
    bias_dev_ = std::make_unique<DeviceBuffer<float>>(bias_);
    d_dev_ = std::make_unique<DeviceBuffer<uint8_t>>(m_cap_ * n_out_ * out_bytes());
    if (c.pre) pre_dev_ = std::make_unique<DeviceBuffer<uint8_t>>(m_cap_ * n * 2);
    if (c.e4m3_out)
      d_scales_dev_ = std::make_unique<DeviceBuffer<float>>(fp8_scale_groups(n_out_) *
                                                            fp8_scale_rows(m_cap_));
  }

  int out_bytes() const { return c_.e4m3_out ? 1 : c_.fp32_out ? 4 : 2; }
  DType out_dtype() const {
    return c_.e4m3_out ? DType::kFloat8E4M3 : c_.fp32_out ? DType::kFloat32 : DType::kBFloat16;
  }

  GroupedGemmFp8Args args() const {
    GroupedGemmFp8Args g{
        .a = a_dev_->view(DType::kFloat8E4M3, {m_cap_, c_.k}),
        .a_scales = a_scales_dev_->view(DType::kFloat32, {kg_, fp8_scale_rows(m_cap_)}),
        .b = b_dev_->view(DType::kFloat8E4M3, {experts_, c_.n, c_.k}),
        .b_scales = b_scales_dev_->view(DType::kFloat32,
                                        {experts_, fp8_scale_groups(c_.n), kg_}),
        .offsets = offsets_dev_->view(DType::kInt32, {experts_ + 1}),
        .d = d_dev_->view(out_dtype(), {m_cap_, n_out_}),
        .epilogue = c_.activation ? GemmEpilogue::kActivation : GemmEpilogue::kLinear,
        .activation = c_.act};
    if (c_.row_scale) g.row_scale = scale_dev_->view(DType::kFloat32, {m_cap_});
    if (c_.bias) g.bias = bias_dev_->view(DType::kFloat32, {experts_, c_.n});
    if (c_.pre) g.pre_activation = pre_dev_->view(DType::kBFloat16, {m_cap_, c_.n});
    if (c_.e4m3_out)
      g.d_scales = d_scales_dev_->view(DType::kFloat32,
                                       {fp8_scale_groups(n_out_), fp8_scale_rows(m_cap_)});
    return g;
  }

  void run() {
    d_dev_->poison();
    if (pre_dev_) pre_dev_->poison();
    if (d_scales_dev_) d_scales_dev_->poison();
    grouped_gemm_fp8(args(), nullptr);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  }

  // The pre-activation (c.pre): poison outside the experts, written inside, bit for bit the
  // linear epilogue's bf16 D of the same operands and bias, and within a bf16 step of the
  // reference's bf16(h + bias).
  void check_pre() const {
    const std::vector<uint8_t> raw = pre_dev_->download();
    const int64_t n = c_.n, row_bytes = n * 2;
    const int first = offsets_.front(), end = offsets_.back();
    for (int64_t r = 0; r < m_cap_; ++r) {
      if (r >= first && r < end) continue;
      ASSERT_TRUE(std::all_of(raw.begin() + r * row_bytes, raw.begin() + (r + 1) * row_bytes,
                              [](uint8_t b) { return b == 0xFF; }))
          << "pre row " << r << " outside the experts was written";
    }
    std::vector<float> pre(m_cap_ * n);
    for (size_t i = 0; i < pre.size(); ++i) {
      uint16_t h;
      std::memcpy(&h, &raw[2 * i], 2);
      pre[i] = bf16_to_float(h);
    }
    for (int64_t r = first; r < end; ++r)
      for (int64_t j = 0; j < n; ++j)
        ASSERT_FALSE(std::isnan(pre[r * n + j]))
            << "pre row " << r << " (expert " << expert_of(r) << ") column " << j
            << " not written";

    // The same GEMM with the linear epilogue and bf16 D [M_cap, N]: D = bf16(h + bias).
    DeviceBuffer<uint8_t> linear(m_cap_ * n * 2);
    linear.poison();
    GroupedGemmFp8Args lin = args();
    lin.epilogue = GemmEpilogue::kLinear;
    lin.d = linear.view(DType::kBFloat16, {m_cap_, n});
    lin.pre_activation = TensorView{};
    lin.row_scale = TensorView{};
    lin.d_scales = TensorView{};
    grouped_gemm_fp8(lin, nullptr);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    const std::vector<uint8_t> lin_raw = linear.download();
    for (size_t i = 0; i < raw.size(); i += 2)
      ASSERT_TRUE(raw[i] == lin_raw[i] && raw[i + 1] == lin_raw[i + 1])
          << "pre differs from the linear GEMM's bf16 D at row " << i / row_bytes << " (expert "
          << expert_of(i / row_bytes) << ") column " << i % row_bytes / 2;

    const std::vector<int> rows = rows_to_check();
    const std::vector<float> want = reference_pre(rows);
    std::vector<float> got;
    for (int r : rows) got.insert(got.end(), pre.begin() + r * n, pre.begin() + (r + 1) * n);
    double rms = 0;
    for (float w : want) rms += double(w) * w;
    rms = std::sqrt(rms / std::max<size_t>(want.size(), 1));
    size_t bad = 0, worst = 0;
    for (size_t i = 0; i < got.size(); ++i) {
      const double diff = std::abs(double(got[i]) - want[i]);
      // One bf16 step (ulp) at the value: h in fp32 and in fp64 can round to neighbours. Plus
      // the fp32 accumulation's difference from fp64.
      const double ulp = want[i] == 0 ? 0 : std::ldexp(1.0, std::ilogb(want[i]) - 7);
      if (diff > ulp + std::ldexp(rms, -8)) ++bad;
      if (!(diff <= std::abs(double(got[worst]) - want[worst]))) worst = i;
    }
    const double error = test::rel_norm_error(got, want);
    EXPECT_EQ(bad, 0u) << bad << " pre elements beyond a bf16 step of the reference; "
                       << worst_pre(rows, got, want, worst);
    test::record_margin("pre", error, 5e-3);
    EXPECT_LE(error, 5e-3) << "pre rel-norm error; " << worst_pre(rows, got, want, worst);
  }

  std::vector<uint8_t> raw_d() const { return d_dev_->download(); }

  // E4M3 d: the same call with bf16 d, quantised row by row by the reference 1x128 quantiser,
  // against the kernel's codes and K-major scales, bit for bit. The scale group's n-blocks (2j,
  // 2j + 1 with a GLU) name the cluster ranks whose amax exchange made it.
  void check_e4m3() const {
    DeviceBuffer<uint16_t> bf16(m_cap_ * n_out_);
    bf16.poison();
    GroupedGemmFp8Args g = args();
    g.d = bf16.view(DType::kBFloat16, {m_cap_, n_out_});
    g.d_scales = TensorView{};
    g.pre_activation = TensorView{};
    grouped_gemm_fp8(g, nullptr);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    const int first = offsets_.front(), end = offsets_.back();
    test::expect_rows_quantised_1x128(
        test::widen(bf16.download()), raw_d(), d_scales_dev_->download(), m_cap_, n_out_, first,
        end, [&](int64_t r, int64_t j) {
          return "row " + std::to_string(r) + " (expert " + std::to_string(expert_of(r)) +
                 ") group " + std::to_string(j) + " (n-blocks " +
                 std::to_string(glu_ ? 2 * j : j) + (glu_ ? ", " + std::to_string(2 * j + 1) : "") +
                 ")";
        });
  }

  // Poison outside the experts, no NaN inside, and the rel-norm error of the checked rows.
  void check(double tolerance) const {
    const std::vector<uint8_t> raw = raw_d();
    const int64_t row_bytes = n_out_ * out_bytes();
    const int first = offsets_.front(), end = offsets_.back();
    for (int64_t r = 0; r < m_cap_; ++r) {
      if (r >= first && r < end) continue;
      ASSERT_TRUE(std::all_of(raw.begin() + r * row_bytes, raw.begin() + (r + 1) * row_bytes,
                              [](uint8_t b) { return b == 0xFF; }))
          << "row " << r << " outside the experts was written";
    }
    const std::vector<float> d = widen(raw);
    for (int64_t r = first; r < end; ++r)
      for (int64_t j = 0; j < n_out_; ++j)
        ASSERT_FALSE(std::isnan(d[r * n_out_ + j]))
            << "row " << r << " (expert " << expert_of(r) << ") column " << j << " not written";

    const std::vector<int> rows = rows_to_check();
    const std::vector<float> want = reference(rows);
    std::vector<float> got;
    for (int r : rows) got.insert(got.end(), d.begin() + r * n_out_, d.begin() + (r + 1) * n_out_);
    const double error = test::rel_norm_error(got, want);
    test::record_margin("d", error, tolerance);
    EXPECT_LE(error, tolerance) << worst(rows, got, want);
  }

 private:
  std::vector<float> widen(const std::vector<uint8_t>& raw) const {
    std::vector<float> d(m_cap_ * n_out_);
    for (size_t i = 0; i < d.size(); ++i) {
      if (c_.fp32_out) {
        std::memcpy(&d[i], &raw[4 * i], 4);
      } else {
        uint16_t h;
        std::memcpy(&h, &raw[2 * i], 2);
        d[i] = bf16_to_float(h);
      }
    }
    return d;
  }

  int expert_of(int64_t row) const {
    return static_cast<int>(std::upper_bound(offsets_.begin(), offsets_.end(), row) -
                            offsets_.begin()) - 1;
  }

  // All rows when the reference is cheap, else each expert's first and last row and a sample;
  // sorted, so that the compact problem's rows stay expert-contiguous.
  std::vector<int> rows_to_check() const {
    const int first = offsets_.front(), end = offsets_.back();
    std::vector<int> rows;
    if (int64_t{end - first} * c_.n * c_.k <= 300'000'000) {
      rows.resize(end - first);
      std::iota(rows.begin(), rows.end(), first);
      return rows;
    }
    for (int64_t e = 0; e < experts_; ++e)
      if (offsets_[e + 1] > offsets_[e]) rows.push_back(offsets_[e]), rows.push_back(offsets_[e + 1] - 1);
    std::uniform_int_distribution<int> pick(first, end - 1);
    const size_t budget = std::clamp<size_t>(size_t(3e9 / double(c_.n * c_.k)), 16, 256);
    while (rows.size() < budget) rows.push_back(pick(test::rng()));
    std::sort(rows.begin(), rows.end());
    return rows;
  }

  // A compact host problem holding only the rows `rows` of A, their scales and row scales, with
  // the same weights and offsets recounted; args() leaves d and pre_activation to the caller.
  struct Compact {
    int64_t s;
    std::vector<uint8_t> a;
    std::vector<float> a_scales, scale;
    std::vector<int32_t> offsets;
  };
  Compact compact(const std::vector<int>& rows) const {
    const int64_t s = static_cast<int64_t>(rows.size()), k = c_.k, pitch = fp8_scale_rows(s);
    Compact p{.s = s, .a = std::vector<uint8_t>(s * k),
              .a_scales = std::vector<float>(kg_ * pitch, 1.0f), .scale = std::vector<float>(s),
              .offsets = std::vector<int32_t>(experts_ + 1, 0)};
    for (int64_t i = 0; i < s; ++i) {
      const int r = rows[i];
      std::copy(a_.begin() + r * k, a_.begin() + (r + 1) * k, p.a.begin() + i * k);
      for (int64_t g = 0; g < kg_; ++g)
        p.a_scales[g * pitch + i] = a_scales_[g * fp8_scale_rows(m_cap_) + r];
      p.scale[i] = scale_[r];
      ++p.offsets[expert_of(r) + 1];
    }
    std::partial_sum(p.offsets.begin(), p.offsets.end(), p.offsets.begin());
    return p;
  }
  GroupedGemmFp8Args compact_args(Compact& p) const {
    auto b = const_cast<uint8_t*>(b_.data());
    auto b_scales = const_cast<float*>(b_scales_.data());
    GroupedGemmFp8Args g{
        .a = host(p.a.data(), DType::kFloat8E4M3, {p.s, c_.k}),
        .a_scales = host(p.a_scales.data(), DType::kFloat32, {kg_, fp8_scale_rows(p.s)}),
        .b = host(b, DType::kFloat8E4M3, {experts_, c_.n, c_.k}),
        .b_scales = host(b_scales, DType::kFloat32, {experts_, fp8_scale_groups(c_.n), kg_}),
        .offsets = host(p.offsets.data(), DType::kInt32, {experts_ + 1}),
        .epilogue = c_.activation ? GemmEpilogue::kActivation : GemmEpilogue::kLinear,
        .activation = c_.act};
    if (c_.row_scale) g.row_scale = host(p.scale.data(), DType::kFloat32, {p.s});
    if (c_.bias) g.bias = host(const_cast<float*>(bias_.data()), DType::kFloat32, {experts_, c_.n});
    return g;
  }

  // The reference's D (fp32, unrounded) on the rows `rows`.
  std::vector<float> reference(const std::vector<int>& rows) const {
    Compact p = compact(rows);
    std::vector<float> d(p.s * n_out_);
    GroupedGemmFp8Args g = compact_args(p);
    g.d = host(d.data(), DType::kFloat32, {p.s, n_out_});
    ref::grouped_gemm_fp8(g);
    return d;
  }

  // The reference's pre-activation bf16(h + bias) on the rows `rows`, as floats (the reference
  // writes pre only next to a bf16 D, which is discarded here).
  std::vector<float> reference_pre(const std::vector<int>& rows) const {
    Compact p = compact(rows);
    std::vector<uint16_t> d(p.s * n_out_), pre(p.s * c_.n);
    GroupedGemmFp8Args g = compact_args(p);
    g.d = host(d.data(), DType::kBFloat16, {p.s, n_out_});
    g.pre_activation = host(pre.data(), DType::kBFloat16, {p.s, c_.n});
    ref::grouped_gemm_fp8(g);
    std::vector<float> out(pre.size());
    for (size_t i = 0; i < pre.size(); ++i) out[i] = bf16_to_float(pre[i]);
    return out;
  }

  std::string worst_pre(const std::vector<int>& rows, const std::vector<float>& got,
                        const std::vector<float>& want, size_t at) const {
    if (got.empty()) return "no rows";
    const int r = rows[at / c_.n];
    return "worst at row " + std::to_string(r) + " (expert " + std::to_string(expert_of(r)) +
           ") h column " + std::to_string(at % c_.n) + " (n-block " +
           std::to_string(at % c_.n / 128) + "): got " + std::to_string(got[at]) + ", want " +
           std::to_string(want[at]);
  }

  // Where the largest difference is, for the failure message.
  std::string worst(const std::vector<int>& rows, const std::vector<float>& got,
                    const std::vector<float>& want) const {
    const auto [at, max_diff] = test::max_abs_diff(got, want);
    if (got.empty()) return "no rows";
    const int r = rows[at / n_out_];
    return "max |diff| " + std::to_string(max_diff) + " at row " + std::to_string(r) +
           " (expert " + std::to_string(expert_of(r)) + ") column " +
           std::to_string(at % n_out_) + ": got " + std::to_string(got[at]) + ", want " +
           std::to_string(want[at]);
  }

  Case c_;
  int64_t experts_ = 0, m_cap_ = 0, n_out_ = 0, kg_ = 0;
  bool glu_ = false;
  std::vector<int32_t> offsets_;
  std::vector<uint8_t> a_, b_;
  std::vector<float> a_scales_, b_scales_, scale_, bias_;
  std::unique_ptr<DeviceBuffer<uint8_t>> a_dev_, b_dev_, d_dev_, pre_dev_;
  std::unique_ptr<DeviceBuffer<float>> a_scales_dev_, b_scales_dev_, scale_dev_, bias_dev_;
  std::unique_ptr<DeviceBuffer<float>> d_scales_dev_;
  std::unique_ptr<DeviceBuffer<int32_t>> offsets_dev_;
};

void run_case(const Case& c, const std::string& name) {
  SCOPED_TRACE(name + " (seed " + std::to_string(test::seed()) + ")");
  Runner runner(c);
  runner.run();
  if (c.e4m3_out) runner.check_e4m3();
  else runner.check(c.fp32_out ? 1e-3 : 5e-3);
  if (c.pre) runner.check_pre();
}

TEST(GroupedGemmFp8, Fc1EveryActivation) {
  MOEFUSE_REQUIRE_HOPPER();
  for (Activation act : {Activation::kSwiGLU, Activation::kGeGLU, Activation::kReGLU,
                         Activation::kClampedSwiGLU, Activation::kSquaredReLU}) {
    for (bool fp32 : {false, true}) {
      // N = 400 (a 16-column tail past 384), K = 208 (a short last K group), ragged rows
      // including empty experts, M not a multiple of 128, rows before and after the experts.
      run_case({.counts = {0, 1, 127, 129, 300, 0, 64, 257}, .row_base = 3, .spare_rows = 70,
                .n = 400, .k = 208, .activation = true, .act = act, .row_scale = true,
                .fp32_out = fp32},
               std::string(activation_name(act)) + (fp32 ? " fp32" : " bf16"));
    }
  }
}

// GPT-OSS: per-expert bias before the activation (FC1, interleaved GLU columns) and before the
// row scale (FC2).
TEST(GroupedGemmFp8, BiasBeforeTheEpilogue) {
  MOEFUSE_REQUIRE_HOPPER();
  for (Activation act : {Activation::kClampedSwiGLU, Activation::kSwiGLU, Activation::kSquaredReLU})
    run_case({.counts = {0, 1, 127, 129, 300, 0, 64, 257}, .row_base = 3, .spare_rows = 70,
              .n = 400, .k = 208, .activation = true, .act = act, .row_scale = true,
              .fp32_out = true, .bias = true},
             std::string(activation_name(act)) + " + bias");
  run_case({.counts = uniform_counts(16, 1500), .spare_rows = 33, .n = 520, .k = 336,
            .row_scale = true, .fp32_out = true, .bias = true},
           "linear + bias + row scale");
}

// The pre-activation output (what the FP8 layer caches for the backward): every activation, with
// and without bias, ragged experts with empty ones, N with a 16-column tail, a short K group,
// rows before and after the experts; and the cluster shapes (phantom partners, odd m-blocks).
TEST(GroupedGemmFp8, PreActivationIsTheLinearGemmsBf16Output) {
  MOEFUSE_REQUIRE_HOPPER();
  for (Activation act : {Activation::kSwiGLU, Activation::kGeGLU, Activation::kReGLU,
                         Activation::kClampedSwiGLU, Activation::kSquaredReLU}) {
    for (bool bias : {false, true}) {
      run_case({.counts = {0, 1, 127, 129, 300, 0, 64, 257}, .row_base = 3, .spare_rows = 70,
                .n = 400, .k = 208, .activation = true, .act = act, .row_scale = true,
                .fp32_out = false, .bias = bias, .pre = true},
               std::string(activation_name(act)) + (bias ? " + bias" : "") + " pre");
    }
  }
  run_case({.counts = {129, 1, 0, 300, 640, 0, 385, 129}, .spare_rows = 5, .n = 336, .k = 272,
            .activation = true, .act = Activation::kSwiGLU, .fp32_out = false, .bias = true,
            .pre = true},
           "swiglu pre, cluster phantoms, N 336");
}

TEST(GroupedGemmFp8, Fc2RowScaleBf16AndFp32) {
  MOEFUSE_REQUIRE_HOPPER();
  for (bool fp32 : {false, true})
    run_case({.counts = uniform_counts(16, 1500), .spare_rows = 33, .n = 520, .k = 336,
              .row_scale = true, .fp32_out = fp32},
             fp32 ? "fp32 out" : "bf16 out");
}

TEST(GroupedGemmFp8, OneExpertHoldingAllRowsAtK7168) {
  MOEFUSE_REQUIRE_HOPPER();
  std::vector<int> hot(16, 0);
  hot[11] = 1000;
  run_case({.counts = hot, .spare_rows = 1, .n = 264, .k = 7168}, "one hot expert, K 7168");
}

TEST(GroupedGemmFp8, NoRowsAtAllWritesNothing) {
  MOEFUSE_REQUIRE_HOPPER();
  run_case({.counts = std::vector<int>(32, 0), .spare_rows = 300, .activation = true},
           "all experts empty");
  run_case({.counts = std::vector<int>(4, 0), .n = 64, .k = 64}, "M_cap = 0");
}

// DeepGEMM's grouped shape (N 4096, K 7168) with fewer rows per group, not multiples of 128.
TEST(GroupedGemmFp8, DeepGemmShapeRagged) {
  MOEFUSE_REQUIRE_HOPPER();
  run_case({.counts = {1000, 777, 0, 1301}, .spare_rows = 5, .n = 4096, .k = 7168},
           "4 groups, N 4096, K 7168");
}

// FC1 of the deepseek-v3 preset slice (H 7168, F 2048, SwiGLU) with skewed routing.
TEST(GroupedGemmFp8, DeepSeekFc1Preset) {
  MOEFUSE_REQUIRE_HOPPER();
  std::vector<int> counts = uniform_counts(4, 1200);
  counts[1] += 700;
  run_case({.counts = counts, .spare_rows = 9, .n = 4096, .k = 7168, .activation = true,
            .row_scale = true, .fp32_out = false, .pre = true},
           "deepseek fc1 swiglu (+ pre)");
}

// The 2-CTA clusters (src/cuda/gemm/cluster_scheduler.h): experts with odd m-block counts
// (their last m-block runs as n-pairs sharing A) and, with 3 n-blocks, a phantom partner per such
// expert; in 128-wide tiles (fp32 output) the last n-block's second 64-row half of B lies
// entirely past N at N 264 (not loaded) and partly at N 336 (bf16 output's 192-wide tiles: the
// cases at the end); the last expert's second half of A lies past M_cap (1 row in its last
// m-block, 5 spare rows). Every output kind.
TEST(GroupedGemmFp8, ClusterPairsOddBlocksAndPhantoms) {
  MOEFUSE_REQUIRE_HOPPER();
  const std::vector<int> counts = {129, 1, 0, 300, 640, 0, 385, 129};
  for (bool fp32 : {false, true}) {
    const std::string out = fp32 ? " fp32" : " bf16";
    run_case({.counts = counts, .spare_rows = 5, .n = 264, .k = 272, .row_scale = true,
              .fp32_out = fp32, .bias = true},
             "linear, N 264" + out);
    run_case({.counts = counts, .spare_rows = 5, .n = 336, .k = 272, .activation = true,
              .act = Activation::kSwiGLU, .fp32_out = fp32},
             "swiglu, N 336" + out);
  }
  // bf16 output runs 192-wide tiles (fp8/config.h Fp8Tile), whose n-block counts at N 264 and
  // 336 are even: N 456 (a 72-column tail, its second B half past N) and 528 (a 144-column
  // tail) give three, and odd tiles start at column 64 of a weight block.
  run_case({.counts = counts, .spare_rows = 5, .n = 456, .k = 272, .row_scale = true,
            .fp32_out = false, .bias = true},
           "linear, N 456 bf16");
  run_case({.counts = counts, .spare_rows = 5, .n = 528, .k = 272, .activation = true,
            .act = Activation::kSwiGLU, .fp32_out = false},
           "swiglu, N 528 bf16");
}

// Several units per cluster with phantoms between live units (7 n-blocks of the bf16 output's
// 192-wide tiles, random expert sizes) and K = 6 blocks, so the 4-stage rings wrap inside and
// across units and the hand-off's tile buffer is reused many times.
TEST(GroupedGemmFp8, SeveralUnitsPerClusterWithPhantoms) {
  MOEFUSE_REQUIRE_HOPPER();
  std::vector<int> counts = uniform_counts(12, 6000);
  counts[3] = 0;
  counts[7] = 1;
  for (Activation act : {Activation::kSwiGLU, Activation::kSquaredReLU})
    run_case({.counts = counts, .row_base = 2, .spare_rows = 40, .n = 1232, .k = 768,
              .activation = true, .act = act, .row_scale = true, .fp32_out = false, .pre = true},
             std::string(activation_name(act)) + ", 7 n-blocks (+ pre)");
  // One K block a unit (K = 128) and about 14 units a cluster: the producer runs four units
  // ahead of the consumers, and the tile slots it hands them (common/tile_slots.cuh) wrap.
  std::vector<int> many = uniform_counts(12, 80000);
  many[5] = 0;
  run_case({.counts = many, .spare_rows = 3, .n = 264, .k = 128, .row_scale = true,
            .fp32_out = false, .bias = true},
           "linear, one K block a unit");
}

// E4M3 output with every activation and the linear epilogue: ragged experts with empty ones,
// rows before and after them, a short K group; GLU N 416 (N_out 208: the second scale group is
// n-blocks 2 and 3, the latter with 16 outputs), N 400 without a GLU (a 16-column tail); with
// and without bias, row scale and the pre-activation.
TEST(GroupedGemmFp8, E4m3OutputIsTheQuantisedBf16Output) {
  MOEFUSE_REQUIRE_HOPPER();
  const std::vector<int> counts = {0, 1, 127, 129, 300, 0, 64, 257};
  for (Activation act : {Activation::kSwiGLU, Activation::kGeGLU, Activation::kReGLU,
                         Activation::kClampedSwiGLU, Activation::kSquaredReLU}) {
    const int64_t n = is_glu(act) ? 416 : 400;
    for (bool extras : {false, true})
      run_case({.counts = counts, .row_base = 3, .spare_rows = 70, .n = n, .k = 208,
                .activation = true, .act = act, .row_scale = extras, .fp32_out = false,
                .bias = extras, .pre = extras, .e4m3_out = true},
               std::string(activation_name(act)) + " e4m3" + (extras ? " + bias, scale, pre" : ""));
  }
  run_case({.counts = counts, .row_base = 3, .spare_rows = 70, .n = 400, .k = 208,
            .row_scale = true, .fp32_out = false, .bias = true, .e4m3_out = true},
           "linear e4m3 + bias, scale");
}

// The n-pairs of the E4M3 GLU output: an odd n-block count (N 352 = 3 n-blocks: every m-block's
// last pair has a phantom partner, and its group, the last, is short), several units a cluster
// so the amax buffers' phases wrap many times, qwen3's FC1 shape (N 1536, K 2048) and gpt-oss's
// (N 5760 = 45 n-blocks, K 2880), all with seven epilogue warps; then K 3200, three.
TEST(GroupedGemmFp8, E4m3GluOutputAcrossClusterPairs) {
  MOEFUSE_REQUIRE_HOPPER();
  run_case({.counts = {129, 1, 0, 300, 640, 0, 385, 129}, .spare_rows = 5, .n = 352, .k = 272,
            .activation = true, .act = Activation::kSwiGLU, .fp32_out = false, .bias = true,
            .e4m3_out = true},
           "swiglu e4m3, N 352 (phantom partners)");
  std::vector<int> counts = uniform_counts(12, 6000);
  counts[3] = 0;
  counts[7] = 1;
  run_case({.counts = counts, .row_base = 2, .spare_rows = 40, .n = 1056, .k = 768,
            .activation = true, .act = Activation::kSwiGLU, .row_scale = true, .fp32_out = false,
            .pre = true, .e4m3_out = true},
           "swiglu e4m3, 9 n-blocks, many units (+ pre)");
  run_case({.counts = uniform_counts(16, 8192), .spare_rows = 3, .n = 1536, .k = 2048,
            .activation = true, .act = Activation::kSwiGLU, .fp32_out = false, .pre = true,
            .e4m3_out = true},
           "qwen3 fc1 e4m3");
  run_case({.counts = uniform_counts(4, 3000), .spare_rows = 3, .n = 5760, .k = 2880,
            .activation = true, .act = Activation::kClampedSwiGLU, .fp32_out = false,
            .bias = true, .pre = true, .e4m3_out = true},
           "gpt-oss fc1 e4m3");
  // Past kSevenWarpsMaxK the drain runs on three epilogue warps instead of seven.
  static_assert(3200 > gemm::fp8::kSevenWarpsMaxK && 2880 <= gemm::fp8::kSevenWarpsMaxK);
  run_case({.counts = {1000, 0, 777, 1301}, .spare_rows = 5, .n = 1056, .k = 3200,
            .activation = true, .act = Activation::kSwiGLU, .row_scale = true, .fp32_out = false,
            .e4m3_out = true},
           "swiglu e4m3, K 3200 (three epilogue warps)");
  run_case({.counts = {1000, 0, 777, 1301}, .spare_rows = 5, .n = 400, .k = 3200,
            .activation = true, .act = Activation::kSquaredReLU, .fp32_out = false,
            .e4m3_out = true},
           "squared relu e4m3, K 3200 (three epilogue warps)");
}

TEST(GroupedGemmFp8, BitwiseRepeatable) {
  MOEFUSE_REQUIRE_HOPPER();
  Runner runner({.counts = uniform_counts(8, 900), .n = 384, .k = 512, .activation = true});
  runner.run();
  const std::vector<uint8_t> first = runner.raw_d();
  runner.run();
  EXPECT_TRUE(first == runner.raw_d());
}

TEST(GroupedGemmFp8, RejectsHostTensors) {
  // Validation runs before any CUDA call, so this runs without a GPU too.
  std::vector<uint8_t> a(4 * 16), b(16 * 16);
  std::vector<float> sa(4), sb(1), d(4 * 16);
  std::vector<int32_t> off = {0, 4};
  const GroupedGemmFp8Args args{.a = host(a.data(), DType::kFloat8E4M3, {4, 16}),
                                .a_scales = host(sa.data(), DType::kFloat32, {1, 4}),
                                .b = host(b.data(), DType::kFloat8E4M3, {1, 16, 16}),
                                .b_scales = host(sb.data(), DType::kFloat32, {1, 1, 1}),
                                .offsets = host(off.data(), DType::kInt32, {2}),
                                .d = host(d.data(), DType::kFloat32, {4, 16})};
  try {
    grouped_gemm_fp8(args, nullptr);
    FAIL() << "accepted host tensors";
  } catch (const InvalidArgument& e) {
    EXPECT_EQ(e.argument(), "b") << e.what();
  }
}

}  // namespace
}  // namespace moefuse
