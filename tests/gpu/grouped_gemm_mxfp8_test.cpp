// The MXFP8 recipe of the FP8 grouped GEMM on the GPU (the exact bf16 emulation of
// moefuse/grouped_gemm_fp8.h) against the fp64 CPU reference of the same recipe
// (src/ref/grouped_gemm_fp8.h) on the same codes and scales.
//
// Operands: fresh random fp32 data, a random power-of-two magnitude per 32-element block (so the
// scales differ), quantised by the MXFP8 quant reference (bit-identical to the GPU quantiser),
// scales transposed to the K-major layouts. Outputs and the workspace are poisoned (0xFF: NaN)
// before every call.
//
// Checks:
// - the workspace's bf16 copies, bit for bit (NaN as NaN), against the exact product
//   e4m3 · 2^(s - 127) rounded once to bf16: every row of a (inside the experts or not) and all of
//   b. This is where a wrong scale, row or column would show, whatever its magnitude;
// - D and the pre-activation keep their poison outside [offsets[0], offsets[E]) and hold no NaN
//   inside;
// - D against the reference, relative norm: fp32 d 1e-5 (the products are exact, so only the
//   tensor cores' accumulation differs from the fp64 sum: groups of products aligned and
//   truncated, about 2e-7 at these K in a bit-accurate model of the H100's); bf16 d and the
//   pre-activation 5e-3, the BF16 GEMM test's bound (the reference rounds h and D to bf16 as the
//   kernel does, so only near-ties differ).
#include <gtest/gtest.h>

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "common/fp8_operands.h"
#include "common/test_util.h"
#include "cuda/gemm/fp8/mxfp8_emulation.h"
#include "dispatch_test_util.h"
#include "formats/fp8.h"
#include "formats/ue8m0.h"
#include "moefuse/grouped_gemm_fp8.h"
#include "ref/bf16_bits.h"
#include "ref/grouped_gemm_fp8.h"
#include "ref/quant.h"

namespace moefuse {
namespace {

using test::DeviceBuffer;
using test::host;

#define CHECK_CUDA(call) ASSERT_EQ((call), cudaSuccess) << #call

constexpr int64_t kGroup = kMxfp8ScaleGroup;

struct Case {
  std::vector<int> counts;
  int row_base = 0, spare_rows = 0;
  int64_t n = 256, k = 160;
  bool activation = false;  // SwiGLU
  bool row_scale = false, fp32_out = true;
  bool bias = false;  // per-expert fp32 bias [E, N] before the activation
  bool pre = false;   // the pre-activation output [M_cap, N] bf16 (activation, bf16 d)
};

// Host operands in the layouts the GEMM reads: codes, K-major e8m0 scales.
struct Operands {
  int64_t experts = 0, m_cap = 0, n = 0, k = 0;
  std::vector<int32_t> offsets;
  std::vector<uint8_t> a, a_scales, b, b_scales;  // a_scales [K/32, pitch], b_scales [E, K/32, N]
  std::vector<float> row_scale, bias;

  int64_t pitch() const { return mxfp8_scale_rows(m_cap); }
  uint8_t a_scale(int64_t r, int64_t j) const { return a_scales[j / kGroup * pitch() + r]; }
  uint8_t b_scale(int64_t e, int64_t i, int64_t j) const {
    return b_scales[(e * (k / kGroup) + j / kGroup) * n + i];
  }
};

Operands shaped(const Case& c) {
  Operands o{.experts = static_cast<int64_t>(c.counts.size()),
             .n = c.n,
             .k = c.k,
             .offsets = test::offsets_of(c.counts, c.row_base)};
  o.m_cap = o.offsets.back() + c.spare_rows;
  o.a.resize(o.m_cap * o.k);
  o.a_scales.resize(o.k / kGroup * o.pitch());
  o.b.resize(o.experts * o.n * o.k);
  o.b_scales.resize(o.experts * (o.k / kGroup) * o.n);
  return o;
}

// x [rows, k] · 2^U(-6, 6) per 32-element block, quantised (row-major scales [rows, k/32]).
void quantize_spread(std::vector<float> x, int64_t rows, int64_t k, std::vector<uint8_t>& codes,
                     std::vector<uint8_t>& scales_rows) {
  const std::vector<float> mag = test::random_uniform(rows * (k / kGroup), -6.0f, 6.0f);
  for (int64_t i = 0; i < rows * k; ++i) x[i] *= std::exp2(std::round(mag[i / kGroup]));
  scales_rows.resize(rows * (k / kGroup));
  ref::quantize_mxfp8(host(x.data(), DType::kFloat32, {rows, k}),
                      host(codes.data(), DType::kFloat8E4M3, {rows, k}),
                      host(scales_rows.data(), DType::kFloat8E8M0, {rows, k / kGroup}));
}

Operands random_operands(const Case& c) {
  Operands o = shaped(c);
  const int64_t kg = o.k / kGroup;
  std::vector<uint8_t> rows;
  quantize_spread(test::random_normal(o.m_cap * o.k), o.m_cap, o.k, o.a, rows);
  transpose_mxfp8_activation_scales(host(rows.data(), DType::kFloat8E8M0, {o.m_cap, kg}),
                                    host(o.a_scales.data(), DType::kFloat8E8M0, {kg, o.pitch()}));
  // GLU weights are read interleaved; random ones need no conversion.
  quantize_spread(test::random_normal(o.experts * o.n * o.k, 1.0f / std::sqrt(float(o.k))),
                  o.experts * o.n, o.k, o.b, rows);
  transpose_mxfp8_weight_scales(host(rows.data(), DType::kFloat8E8M0, {o.experts, o.n, kg}),
                                host(o.b_scales.data(), DType::kFloat8E8M0, {o.experts, kg, o.n}));
  o.row_scale = test::random_uniform(o.m_cap, 0.1f, 1.0f);
  o.bias = test::random_normal(o.experts * o.n);
  return o;
}

// bf16 bits of e4m3(code) · 2^(scale - 127): the exact product, rounded once (to nearest even).
uint16_t exact_bf16(uint8_t code, uint8_t scale) {
  return ref::bf16_bits(double(formats::e4m3_to_float(code)) *
                        double(formats::ue8m0_to_float(scale)));
}

bool same_bf16(uint16_t got, uint16_t want) {
  auto is_nan = [](uint16_t h) { return (h & 0x7F80) == 0x7F80 && (h & 0x7F) != 0; };
  return got == want || (is_nan(got) && is_nan(want));
}

std::vector<float> widen(const std::vector<uint8_t>& raw, bool fp32) {
  std::vector<float> v(raw.size() / (fp32 ? 4 : 2));
  for (size_t i = 0; i < v.size(); ++i) {
    if (fp32) {
      std::memcpy(&v[i], &raw[4 * i], 4);
    } else {
      uint16_t h;
      std::memcpy(&h, &raw[2 * i], 2);
      v[i] = test::bf16_to_float(h);
    }
  }
  return v;
}

// Device copies of one problem's operands, the call, and the checks against the reference.
class Runner {
 public:
  Runner(const Case& c, const Operands& o, cudaStream_t stream = nullptr)
      : c_(c), o_(o), stream_(stream) {
    n_out_ = c.activation ? c.n / 2 : c.n;
    a_ = std::make_unique<DeviceBuffer<uint8_t>>(o.a, stream);
    a_scales_ = std::make_unique<DeviceBuffer<uint8_t>>(o.a_scales, stream);
    b_ = std::make_unique<DeviceBuffer<uint8_t>>(o.b, stream);
    b_scales_ = std::make_unique<DeviceBuffer<uint8_t>>(o.b_scales, stream);
    offsets_ = std::make_unique<DeviceBuffer<int32_t>>(o.offsets, stream);
    row_scale_ = std::make_unique<DeviceBuffer<float>>(o.row_scale, stream);
    bias_ = std::make_unique<DeviceBuffer<float>>(o.bias, stream);
    d_ = std::make_unique<DeviceBuffer<uint8_t>>(o.m_cap * n_out_ * out_bytes(), stream);
    pre_ = std::make_unique<DeviceBuffer<uint8_t>>(c.pre ? o.m_cap * c.n * 2 : 0, stream);
    workspace_ =
        std::make_unique<DeviceBuffer<uint8_t>>(grouped_gemm_fp8_workspace_size(args()), stream);
  }

  // New data and offsets in the same buffers (the same shapes and M_cap): graph replays.
  void reload(const Case& c, const Operands& o) {
    c_ = c;
    o_ = o;
    a_->upload(o.a);
    a_scales_->upload(o.a_scales);
    b_->upload(o.b);
    b_scales_->upload(o.b_scales);
    offsets_->upload(o.offsets);
    row_scale_->upload(o.row_scale);
    bias_->upload(o.bias);
  }

  GroupedGemmFp8Args args() const {
    GroupedGemmFp8Args g{
        .a = a_->view(DType::kFloat8E4M3, {o_.m_cap, o_.k}),
        .a_scales = a_scales_->view(DType::kFloat8E8M0, {o_.k / kGroup, o_.pitch()}),
        .b = b_->view(DType::kFloat8E4M3, {o_.experts, o_.n, o_.k}),
        .b_scales = b_scales_->view(DType::kFloat8E8M0, {o_.experts, o_.k / kGroup, o_.n}),
        .offsets = offsets_->view(DType::kInt32, {o_.experts + 1}),
        .d = d_->view(c_.fp32_out ? DType::kFloat32 : DType::kBFloat16, {o_.m_cap, n_out_}),
        .epilogue = c_.activation ? GemmEpilogue::kActivation : GemmEpilogue::kLinear,
        .activation = Activation::kSwiGLU,
        .recipe = Fp8Recipe::kMxfp8};
    if (c_.row_scale) g.row_scale = row_scale_->view(DType::kFloat32, {o_.m_cap});
    if (c_.bias) g.bias = bias_->view(DType::kFloat32, {o_.experts, o_.n});
    if (c_.pre) g.pre_activation = pre_->view(DType::kBFloat16, {o_.m_cap, o_.n});
    if (workspace_) g.workspace = {.data = workspace_->data(), .bytes = workspace_->size()};
    return g;
  }

  void poison() {
    d_->poison();
    pre_->poison();
    workspace_->poison();
  }

  void run() {
    poison();
    grouped_gemm_fp8(args(), stream_);
    CHECK_CUDA(cudaStreamSynchronize(stream_));
  }

  // The workspace's copies against exact_bf16, every element of a (all M_cap rows) and of b.
  void expect_copies_exact() const {
    const std::vector<uint8_t> ws = workspace_->download();
    auto at = [&](size_t byte) {
      uint16_t h;
      std::memcpy(&h, &ws[byte], 2);
      return h;
    };
    for (int64_t r = 0; r < o_.m_cap; ++r)
      for (int64_t j = 0; j < o_.k; ++j) {
        const uint8_t code = o_.a[r * o_.k + j], scale = o_.a_scale(r, j);
        const uint16_t got = at(2 * (r * o_.k + j)), want = exact_bf16(code, scale);
        ASSERT_TRUE(same_bf16(got, want))
            << "deq(a)[" << r << ", " << j << "] of code 0x" << std::hex << +code << ", scale 0x"
            << +scale << ": got 0x" << got << ", want 0x" << want;
      }
    const size_t b_offset =
        gemm::fp8::mxfp8_workspace(o_.m_cap, o_.experts, o_.n, o_.k).b_offset;
    for (int64_t e = 0; e < o_.experts; ++e)
      for (int64_t i = 0; i < o_.n; ++i)
        for (int64_t j = 0; j < o_.k; ++j) {
          const int64_t idx = (e * o_.n + i) * o_.k + j;
          const uint8_t code = o_.b[idx], scale = o_.b_scale(e, i, j);
          const uint16_t got = at(b_offset + 2 * idx), want = exact_bf16(code, scale);
          ASSERT_TRUE(same_bf16(got, want))
              << "deq(b)[" << e << ", " << i << ", " << j << "] of code 0x" << std::hex << +code
              << ", scale 0x" << +scale << ": got 0x" << got << ", want 0x" << want;
        }
  }

  // D (and pre) keep their poison outside the experts' rows.
  void expect_poison_outside() const {
    expect_rows_poisoned(d_->download(), n_out_ * out_bytes(), "d");
    if (c_.pre) expect_rows_poisoned(pre_->download(), o_.n * 2, "pre_activation");
  }

  std::vector<float> d() const { return widen(d_->download(), c_.fp32_out); }

  // The reference's D and pre-activation (as floats) from the same host operands, same d dtype.
  struct Reference {
    std::vector<float> d, pre;
  };
  Reference reference() const {
    Operands o = o_;
    std::vector<uint8_t> d(o.m_cap * n_out_ * out_bytes()), pre(c_.pre ? o.m_cap * o.n * 2 : 0);
    GroupedGemmFp8Args g{
        .a = host(o.a.data(), DType::kFloat8E4M3, {o.m_cap, o.k}),
        .a_scales = host(o.a_scales.data(), DType::kFloat8E8M0, {o.k / kGroup, o.pitch()}),
        .b = host(o.b.data(), DType::kFloat8E4M3, {o.experts, o.n, o.k}),
        .b_scales = host(o.b_scales.data(), DType::kFloat8E8M0, {o.experts, o.k / kGroup, o.n}),
        .offsets = host(o.offsets.data(), DType::kInt32, {o.experts + 1}),
        .d = host(d.data(), c_.fp32_out ? DType::kFloat32 : DType::kBFloat16, {o.m_cap, n_out_}),
        .epilogue = c_.activation ? GemmEpilogue::kActivation : GemmEpilogue::kLinear,
        .activation = Activation::kSwiGLU,
        .recipe = Fp8Recipe::kMxfp8};
    if (c_.row_scale) g.row_scale = host(o.row_scale.data(), DType::kFloat32, {o.m_cap});
    if (c_.bias) g.bias = host(o.bias.data(), DType::kFloat32, {o.experts, o.n});
    if (c_.pre) g.pre_activation = host(pre.data(), DType::kBFloat16, {o.m_cap, o.n});
    ref::grouped_gemm_fp8(g);
    return {.d = widen(d, c_.fp32_out), .pre = widen(pre, false)};
  }

  // The experts' rows of D (and pre) against the reference, except `skip_rows`.
  void expect_close(const Reference& want, double tolerance,
                    const std::vector<int64_t>& skip_rows = {}) const {
    const std::vector<float> d = this->d();
    expect_rows_close(d, want.d, n_out_, tolerance, skip_rows, "d");
    if (c_.pre)
      expect_rows_close(widen(pre_->download(), false), want.pre, o_.n, 5e-3, skip_rows, "pre");
  }

  double tolerance() const { return c_.fp32_out ? 1e-5 : 5e-3; }
  const Operands& operands() const { return o_; }

 private:
  int out_bytes() const { return c_.fp32_out ? 4 : 2; }

  void expect_rows_poisoned(const std::vector<uint8_t>& raw, int64_t row_bytes,
                            const std::string& what) const {
    const int64_t first = o_.offsets.front(), end = o_.offsets.back();
    for (int64_t r = 0; r < o_.m_cap; ++r) {
      if (r >= first && r < end) continue;
      ASSERT_TRUE(std::all_of(raw.begin() + r * row_bytes, raw.begin() + (r + 1) * row_bytes,
                              [](uint8_t v) { return v == 0xFF; }))
          << what << " row " << r << " outside the experts was written";
    }
  }

  void expect_rows_close(const std::vector<float>& got_all, const std::vector<float>& want_all,
                         int64_t cols, double tolerance, const std::vector<int64_t>& skip_rows,
                         const std::string& what) const {
    std::vector<float> got, want;
    for (int64_t r = o_.offsets.front(); r < o_.offsets.back(); ++r) {
      if (std::find(skip_rows.begin(), skip_rows.end(), r) != skip_rows.end()) continue;
      for (int64_t j = 0; j < cols; ++j)
        ASSERT_FALSE(std::isnan(got_all[r * cols + j]))
            << what << " row " << r << " column " << j << " not written (or NaN)";
      got.insert(got.end(), got_all.begin() + r * cols, got_all.begin() + (r + 1) * cols);
      want.insert(want.end(), want_all.begin() + r * cols, want_all.begin() + (r + 1) * cols);
    }
    const auto [at, diff] = test::max_abs_diff(got, want);
    EXPECT_LE(test::rel_norm_error(got, want), tolerance)
        << what << ": max |diff| " << diff << " at element " << at << " of the checked rows";
  }

  Case c_;
  Operands o_;
  cudaStream_t stream_;
  int64_t n_out_ = 0;
  std::unique_ptr<DeviceBuffer<uint8_t>> a_, a_scales_, b_, b_scales_, d_, pre_, workspace_;
  std::unique_ptr<DeviceBuffer<int32_t>> offsets_;
  std::unique_ptr<DeviceBuffer<float>> row_scale_, bias_;
};

void run_case(const Case& c, const std::string& name) {
  SCOPED_TRACE(name + " (seed " + std::to_string(test::seed()) + ")");
  Runner runner(c, random_operands(c));
  runner.run();
  runner.expect_copies_exact();
  runner.expect_poison_outside();
  runner.expect_close(runner.reference(), runner.tolerance());
}

// Ragged experts with empty ones and one of a single row, M not a multiple of 128, rows before
// and after the experts; K = 160 (a multiple of 32, not of 64); N = 400 (N % 16 == 0, a
// 16-column tail past 384).
const std::vector<int> kRagged = {0, 1, 127, 129, 300, 0, 64, 257};

TEST(GroupedGemmMxfp8, Fc1SwiGluBiasAndPreActivation) {
  MOEFUSE_REQUIRE_HOPPER();
  run_case({.counts = kRagged, .row_base = 3, .spare_rows = 70, .n = 400, .k = 160,
            .activation = true, .row_scale = true, .fp32_out = false, .bias = true, .pre = true},
           "swiglu + bias + row scale + pre, bf16 d");
  run_case({.counts = kRagged, .row_base = 3, .spare_rows = 70, .n = 400, .k = 160,
            .activation = true, .fp32_out = true, .bias = true},
           "swiglu + bias, fp32 d");
}

TEST(GroupedGemmMxfp8, Fc2LinearRowScaleBf16AndFp32) {
  MOEFUSE_REQUIRE_HOPPER();
  for (bool fp32 : {false, true})
    run_case({.counts = test::uniform_counts(8, 1500), .spare_rows = 33, .n = 272, .k = 224,
              .row_scale = true, .fp32_out = fp32},
             fp32 ? "fp32 d" : "bf16 d");
}

TEST(GroupedGemmMxfp8, OneExpertHoldingAllRows) {
  MOEFUSE_REQUIRE_HOPPER();
  std::vector<int> hot(16, 0);
  hot[11] = 1000;
  run_case({.counts = hot, .spare_rows = 1, .n = 144, .k = 96, .row_scale = true},
           "one hot expert");
}

TEST(GroupedGemmMxfp8, NoRowsAtAllWritesNothing) {
  MOEFUSE_REQUIRE_HOPPER();
  run_case({.counts = std::vector<int>(8, 0), .row_base = 5, .spare_rows = 300, .n = 64, .k = 64,
            .activation = true, .fp32_out = false, .pre = true},
           "all experts empty");
  run_case({.counts = std::vector<int>(4, 0), .n = 64, .k = 64}, "M_cap = 0");
}

// Every (code, scale) pair: a [256, 256] with a[r, j] = code j at scale code r, b [1, 256, 256]
// likewise with scale code n: the copies against exact_bf16, so both range ends (Inf from 2^128,
// bf16 subnormals rounded below 2^-130, 0 at or below 2^-134), NaN codes and the NaN scale.
TEST(GroupedGemmMxfp8, DequantisesEveryCodeAtEveryScale) {
  MOEFUSE_REQUIRE_HOPPER();
  const Case c{.counts = {256}, .n = 256, .k = 256};
  Operands o = shaped(c);
  ASSERT_EQ(o.pitch(), 256);
  for (int64_t r = 0; r < 256; ++r)
    for (int64_t j = 0; j < 256; ++j) {
      o.a[r * 256 + j] = o.b[r * 256 + j] = static_cast<uint8_t>(j);
      o.a_scales[j / kGroup * 256 + r] = o.b_scales[j / kGroup * 256 + r] = static_cast<uint8_t>(r);
    }
  Runner runner(c, o);
  runner.run();  // D is Inf and NaN here; only the copies are checked
  runner.expect_copies_exact();
}

// The range ends through the GEMM, fp32 d. Scale group 0 of K holds a at 2^120 and b at 2^-120,
// group 1 a at 2^-127 (bf16 subnormals, exact: the codes are >= 2^-3) and b at 2^127 (up to
// 1.875 · 2^127, finite); every product is exact, so D matches the reference at 1e-5 (this also
// shows the tensor cores keep bf16 subnormal operands). Two rows differ from the reference on
// purpose, as grouped_gemm_fp8.h documents:
//   kInfRow: group 0 all 448 at 2^127: deq(a) = Inf (>= 2^128), so D = +Inf (b > 0), where the
//     reference's fp64 products give 448 · 2^7 · sum(b) (finite);
//   kZeroRow: group 1 all 2^-9 at 2^-127 = 2^-136, below bf16's subnormals: 0, so D = 0, where
//     the reference gives 2^-9 · sum(b · 2^127 · 2^-127) > 0.
TEST(GroupedGemmMxfp8, RangeEndsAgainstTheReference) {
  MOEFUSE_REQUIRE_HOPPER();
  constexpr int64_t kInfRow = 5, kZeroRow = 160;
  const Case c{.counts = {150, 90}, .spare_rows = 6, .n = 64, .k = 64};
  Operands o = shaped(c);
  std::uniform_int_distribution<int> exponent(-3, 0), mantissa(0, 7), sign(0, 1);
  auto normal_code = [&](bool negative) {  // (1 + m/8) · 2^e, e in [-3, 0]
    return static_cast<uint8_t>((negative ? 0x80 : 0) | (exponent(test::rng()) + 7) << 3 |
                                mantissa(test::rng()));
  };
  const uint8_t k2m120 = 127 - 120, k2p120 = 127 + 120, k2m127 = 0, k2p127 = 254, k2p0 = 127;
  for (int64_t e = 0; e < o.experts; ++e)
    for (int64_t i = 0; i < o.n; ++i) {
      for (int64_t j = 0; j < o.k; ++j) o.b[(e * o.n + i) * o.k + j] = normal_code(false);
      o.b_scales[(e * 2 + 0) * o.n + i] = k2m120;
      o.b_scales[(e * 2 + 1) * o.n + i] = k2p127;
    }
  for (int64_t r = 0; r < o.m_cap; ++r) {
    for (int64_t j = 0; j < o.k; ++j) o.a[r * o.k + j] = normal_code(sign(test::rng()));
    o.a_scales[0 * o.pitch() + r] = k2p120;
    o.a_scales[1 * o.pitch() + r] = k2m127;
  }
  for (int64_t j = 0; j < kGroup; ++j) {
    o.a[kInfRow * o.k + j] = formats::kE4M3MaxCode;  // 448
    o.a[kZeroRow * o.k + j] = 0x00;
    o.a[kZeroRow * o.k + kGroup + j] = 0x01;  // 2^-9, the smallest subnormal
  }
  o.a_scales[kInfRow] = k2p127;
  o.a_scales[kZeroRow] = k2p0;

  Runner runner(c, o);
  runner.run();
  runner.expect_copies_exact();
  runner.expect_poison_outside();
  const Runner::Reference want = runner.reference();
  runner.expect_close(want, 1e-5, {kInfRow, kZeroRow});
  const std::vector<float> d = runner.d();
  for (int64_t i = 0; i < o.n; ++i) {
    EXPECT_TRUE(std::isfinite(want.d[kInfRow * o.n + i]));
    EXPECT_EQ(d[kInfRow * o.n + i], INFINITY) << "column " << i;
    EXPECT_GT(want.d[kZeroRow * o.n + i], 0.0f);
    EXPECT_EQ(d[kZeroRow * o.n + i], 0.0f) << "column " << i;
  }
}

// One capture, replays with new offsets and new data in the same buffers: the dequantise passes
// and the GEMM read everything on the device.
TEST(GroupedGemmMxfp8, GraphReplayReadsNewOffsetsAndData) {
  MOEFUSE_REQUIRE_HOPPER();
  cudaStream_t stream;
  CHECK_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  constexpr int kCapacity = 700;  // M_cap, fixed across replays
  auto case_of = [](std::vector<int> counts) {
    const int rows = std::accumulate(counts.begin(), counts.end(), 0);
    return Case{.counts = std::move(counts), .spare_rows = kCapacity - rows, .n = 192, .k = 160,
                .activation = true, .row_scale = true, .fp32_out = false, .bias = true,
                .pre = true};
  };
  const Case first = case_of({300, 0, 211, 90});
  Runner runner(first, random_operands(first), stream);
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  CHECK_CUDA(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
  grouped_gemm_fp8(runner.args(), stream);
  CHECK_CUDA(cudaStreamEndCapture(stream, &graph));
  CHECK_CUDA(cudaGraphInstantiate(&exec, graph, 0));
  for (const std::vector<int>& counts :
       std::vector<std::vector<int>>{{0, 601, 0, 0}, {1, 1, 1, 697}, {300, 0, 211, 90}}) {
    SCOPED_TRACE("counts " + std::to_string(counts[0]) + "," + std::to_string(counts[1]) + "," +
                 std::to_string(counts[2]) + "," + std::to_string(counts[3]));
    const Case c = case_of(counts);
    runner.reload(c, random_operands(c));
    runner.poison();
    CHECK_CUDA(cudaGraphLaunch(exec, stream));
    CHECK_CUDA(cudaStreamSynchronize(stream));
    runner.expect_copies_exact();
    runner.expect_poison_outside();
    runner.expect_close(runner.reference(), runner.tolerance());
  }
  CHECK_CUDA(cudaGraphExecDestroy(exec));
  CHECK_CUDA(cudaGraphDestroy(graph));
  CHECK_CUDA(cudaStreamDestroy(stream));
}

}  // namespace
}  // namespace moefuse
