// The backward grouped GEMMs on the GPU against fp64 CPU references on the same bf16 inputs.
//
// Tolerances (relative norm): bf16 outputs carry bf16 rounding (≈ 1.1e-3 in norm), 5e-3 leaves
// room for the fp32 activation math and is 2× a cuBLAS-like 2.5e-3; fp32 outputs carry only fp32
// accumulation error: 1e-4 (dgrad, wgrad). dp is a sum of F products g·act where g = dys·W2 has
// been rounded to bf16 (the fused epilogue's hand-off stages g as bf16, the unfused twin stores
// it): 5e-3. Rows (and experts, with accumulate) that
// must not be written keep their poison bit for bit; rows past offsets[E] of the wgrad operands
// hold NaN, so a tail block that were not zeroed would poison the result.
#include <gtest/gtest.h>

#include <cuda_runtime.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <numeric>
#include <string>
#include <tuple>
#include <vector>

#include "common/fp8_operands.h"
#include "common/test_util.h"
#include "cuda/gemm/backward/config.h"
#include "cuda/gemm/backward/segment_sums.h"
#include "moefuse/grouped_gemm.h"
#include "moefuse/grouped_gemm_backward.h"
#include "ref/expert_mlp.h"

namespace moefuse {
namespace {

#define CHECK_CUDA(call) ASSERT_EQ((call), cudaSuccess) << #call

float round_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  u += 0x7FFF + ((u >> 16) & 1);
  u &= 0xFFFF0000u;
  std::memcpy(&f, &u, 4);
  return f;
}
// Values already rounded to bf16 (so the reference sees exactly what the GPU sees).
std::vector<float> random_bf16(size_t n, float stddev = 1.0f) {
  std::vector<float> v = test::random_normal(n, stddev);
  for (float& x : v) x = round_bf16(x);
  return v;
}
std::vector<uint16_t> bits_bf16(const std::vector<float>& v) {
  std::vector<uint16_t> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) {
    uint32_t u;
    std::memcpy(&u, &v[i], 4);
    out[i] = std::isnan(v[i]) ? 0x7FC0 : static_cast<uint16_t>(u >> 16);
  }
  return out;
}
float from_bits(uint16_t h) {
  const uint32_t u = uint32_t{h} << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// A device buffer of bf16 (stored from float values) or fp32 or int32, poisoned on creation.
struct Buffer {
  void* ptr = nullptr;
  size_t bytes = 0;
  DType dtype;
  explicit Buffer(size_t elems, DType t) : bytes(elems * (dtype_bits(t) / 8)), dtype(t) {
    if (cudaMalloc(&ptr, std::max<size_t>(bytes, 16)) != cudaSuccess) ptr = nullptr;
    poison();
  }
  ~Buffer() { cudaFree(ptr); }
  Buffer(const Buffer&) = delete;
  void poison() { cudaMemset(ptr, 0xFF, bytes); }  // NaN in bf16 and fp32, -1 in int32
  void upload(const std::vector<float>& v) {
    if (dtype == DType::kBFloat16) {
      const auto b = bits_bf16(v);
      cudaMemcpy(ptr, b.data(), b.size() * 2, cudaMemcpyHostToDevice);
    } else {
      cudaMemcpy(ptr, v.data(), v.size() * 4, cudaMemcpyHostToDevice);
    }
  }
  void upload(const std::vector<int>& v) {
    cudaMemcpy(ptr, v.data(), v.size() * 4, cudaMemcpyHostToDevice);
  }
  std::vector<float> download() const {
    std::vector<float> v(bytes / (dtype_bits(dtype) / 8));
    if (dtype == DType::kBFloat16) {
      std::vector<uint16_t> b(v.size());
      cudaMemcpy(b.data(), ptr, bytes, cudaMemcpyDeviceToHost);
      for (size_t i = 0; i < v.size(); ++i) v[i] = from_bits(b[i]);
    } else {
      cudaMemcpy(v.data(), ptr, bytes, cudaMemcpyDeviceToHost);
    }
    return v;
  }
  std::vector<uint8_t> raw() const {
    std::vector<uint8_t> v(bytes);
    cudaMemcpy(v.data(), ptr, bytes, cudaMemcpyDeviceToHost);
    return v;
  }
  TensorView view(std::initializer_list<int64_t> shape) const {
    return TensorView::contiguous(ptr, dtype, shape, Device::kCuda);
  }
};
using BufferPtr = std::unique_ptr<Buffer>;
BufferPtr buffer(int64_t elems, DType t) { return std::make_unique<Buffer>(size_t(elems), t); }

using test::offsets_of;
int expert_of(const std::vector<int>& off, int row) {
  return static_cast<int>(std::upper_bound(off.begin(), off.end(), row) - off.begin()) - 1;
}
using test::uniform_counts;

// Rows [lo, hi) of a row-major byte image that must still be all 0xFF.
std::string untouched(const std::vector<uint8_t>& raw, int64_t row_bytes, int64_t rows,
                      int lo, int hi, const std::string& what) {
  for (int64_t r = 0; r < rows; ++r) {
    if (r >= lo && r < hi) continue;
    if (!std::all_of(raw.begin() + r * row_bytes, raw.begin() + (r + 1) * row_bytes,
                     [](uint8_t b) { return b == 0xFF; }))
      return what + " row " + std::to_string(r) + " outside the experts was written";
  }
  return "";
}

// Up to `budget` rows to check: every expert's first and last row, then random ones.
std::vector<int> sample_rows(const std::vector<int>& off, size_t budget) {
  std::vector<int> rows;
  const int lo = off.front(), hi = off.back();
  if (hi - lo <= static_cast<int>(budget)) {
    rows.resize(hi - lo);
    std::iota(rows.begin(), rows.end(), lo);
    return rows;
  }
  for (size_t e = 0; e + 1 < off.size(); ++e)
    if (off[e + 1] > off[e]) rows.push_back(off[e]), rows.push_back(off[e + 1] - 1);
  std::uniform_int_distribution<int> pick(lo, hi - 1);
  while (rows.size() < budget) rows.push_back(pick(test::rng()));
  return rows;
}

// ---- dgrad ---------------------------------------------------------------------------------

struct DgradCase {
  std::vector<int> counts;
  int row_base = 0, spare_rows = 0;
  int64_t k = 128, n = 256;
  bool fp32 = false;
};

void run_dgrad(const DgradCase& c, const std::string& name) {
  SCOPED_TRACE(name + " (seed " + std::to_string(test::seed()) + ")");
  const int E = static_cast<int>(c.counts.size());
  const std::vector<int> off = offsets_of(c.counts, c.row_base);
  const int64_t m_cap = off.back() + c.spare_rows;
  const std::vector<float> a = random_bf16(m_cap * c.k), b = random_bf16(E * c.k * c.n, 1.0f / std::sqrt(float(c.k)));
  auto a_d = buffer(m_cap * c.k, DType::kBFloat16), b_d = buffer(E * c.k * c.n, DType::kBFloat16),
       o_d = buffer(E + 1, DType::kInt32),
       d_d = buffer(m_cap * c.n, c.fp32 ? DType::kFloat32 : DType::kBFloat16);
  a_d->upload(a), b_d->upload(b), o_d->upload(off);
  grouped_gemm_dgrad({.a = a_d->view({m_cap, c.k}), .b = b_d->view({E, c.k, c.n}),
                      .offsets = o_d->view({E + 1}), .d = d_d->view({m_cap, c.n})},
                     nullptr);
  CHECK_CUDA(cudaDeviceSynchronize());
  const std::string violation = untouched(d_d->raw(), c.n * (c.fp32 ? 4 : 2), m_cap, off.front(),
                                          off.back(), "d");
  EXPECT_TRUE(violation.empty()) << violation;
  const std::vector<float> d = d_d->download();
  std::vector<float> got;
  std::vector<double> want;
  std::vector<double> row(c.n);
  for (int r : sample_rows(off, std::clamp<size_t>(size_t(2e9 / double(c.n * c.k)), 16, 2048))) {
    const int e = expert_of(off, r);
    // Along B's rows (q outer), not down its columns: the same sums, in the same order, from
    // contiguous memory (column walks made PresetShapes the suite's slowest test).
    std::fill(row.begin(), row.end(), 0.0);
    for (int64_t q = 0; q < c.k; ++q) {
      const double aq = a[r * c.k + q];
      const float* b_q = b.data() + (e * c.k + q) * c.n;
      for (int64_t j = 0; j < c.n; ++j) row[j] += aq * b_q[j];
    }
    want.insert(want.end(), row.begin(), row.end());
    got.insert(got.end(), d.begin() + r * c.n, d.begin() + (r + 1) * c.n);
  }
  EXPECT_LE(test::rel_norm_error(got, want), c.fp32 ? 1e-4 : 5e-3) << "d";
}

TEST(GroupedGemmBackward, DgradRaggedRowsAndTails) {
  MOEFUSE_REQUIRE_HOPPER();
  // N = 328 (not a multiple of 256 or 64), K = 200 (not a multiple of 64), empty experts.
  for (bool fp32 : {false, true})
    run_dgrad({.counts = {0, 1, 127, 129, 300, 0, 64, 257}, .row_base = 3, .spare_rows = 70,
               .k = 200, .n = 328, .fp32 = fp32},
              fp32 ? "fp32" : "bf16");
  std::vector<int> hot(16, 0);
  hot[5] = 1000;
  run_dgrad({.counts = hot, .k = 64, .n = 256}, "one expert holds every row");
  run_dgrad({.counts = std::vector<int>(8, 0), .spare_rows = 40}, "no rows at all");
  run_dgrad({.counts = std::vector<int>(4, 0), .k = 64, .n = 64}, "M_cap = 0");
  // N = 576 = 3 × 192 with bf16 D: the narrow 128 × 192 tiles (config.h dgrad_narrow); fp32 D
  // keeps the 256-wide ones.
  for (bool fp32 : {false, true})
    run_dgrad({.counts = {0, 1, 127, 129, 300, 0, 64, 257}, .row_base = 3, .spare_rows = 70,
               .k = 200, .n = 576, .fp32 = fp32},
              fp32 ? "N 576 fp32" : "N 576 bf16, narrow");
}


// ---- FC2 dgrad + activation backward -------------------------------------------------------

struct Fc2Case {
  std::vector<int> counts;
  int row_base = 0, spare_rows = 0;
  int64_t h = 128, f = 256;
  Activation act = Activation::kSwiGLU;
  bool row_scale = true, bias = true, unfused = false;
  // d_b2 too (accumulate: onto random values); fused with bias: dp's b2 term by the d_b2 pass's
  // dot partials (scratch.bias_partial), or read by the dp reduction.
  bool d_b2 = true, accumulate = false, bias_dots = true;
  int max_ctas = 0;
};

// Runs the fused kernel (or the unfused twin) and compares d_pre, scaled_act, dp and d_b2.
class Fc2Runner {
 public:
  explicit Fc2Runner(const Fc2Case& c) : c_(c) {
    E_ = static_cast<int>(c.counts.size());
    glu_ = is_glu(c.act);
    fc1_ = glu_ ? 2 * c.f : c.f;
    m_cap_ = offsets_of(c.counts, c.row_base).back() + c.spare_rows;
    dys_d_ = buffer(m_cap_ * c.h, DType::kBFloat16);
    w2_d_ = buffer(E_ * c.h * c.f, DType::kBFloat16);
    pre_d_ = buffer(m_cap_ * fc1_, DType::kBFloat16);
    scale_d_ = buffer(m_cap_, DType::kFloat32);
    b2_d_ = buffer(E_ * c.h, DType::kFloat32);
    off_d_ = buffer(E_ + 1, DType::kInt32);
    d_pre_d_ = buffer(m_cap_ * fc1_, DType::kBFloat16);
    act_d_ = buffer(m_cap_ * c.f, DType::kBFloat16);
    dp_d_ = buffer(m_cap_, DType::kFloat32);
    partial_d_ = buffer(m_cap_ * fc2_dgrad_dp_blocks(c.f), DType::kFloat32);
    bias_partial_d_ = buffer(fc2_dgrad_bias_pieces(c.h) * m_cap_, DType::kFloat32);
    d_b2_d_ = buffer(E_ * c.h, DType::kFloat32);
    units_d_ = buffer(fc2_dgrad_d_b2_units(m_cap_, E_) * c.h, DType::kFloat32);
    g_d_ = buffer(m_cap_ * c.f, DType::kBFloat16);
    w2_ = random_bf16(E_ * c.h * c.f, 1.0f / std::sqrt(float(c.h)));
    b2_ = test::random_normal(E_ * c.h, 0.5f);
    w2_d_->upload(w2_), b2_d_->upload(b2_);
    refresh(c.counts);
  }
  // New offsets and new data (for graph replays: same buffers).
  void refresh(const std::vector<int>& counts) {
    off_ = offsets_of(counts, c_.row_base);
    ASSERT_LE(off_.back(), m_cap_);
    dys_ = random_bf16(m_cap_ * c_.h);
    pre_ = random_bf16(m_cap_ * fc1_, 2.0f);
    scale_ = test::random_uniform(m_cap_, 0.1f, 1.0f);
    dys_d_->upload(dys_), pre_d_->upload(pre_), scale_d_->upload(scale_), off_d_->upload(off_);
    // The dp partials too: a partial the kernel did not write must not reach dp.
    for (Buffer* b : {d_pre_d_.get(), act_d_.get(), dp_d_.get(), partial_d_.get(),
                      bias_partial_d_.get(), d_b2_d_.get(), units_d_.get()})
      b->poison();
    if (c_.accumulate) {
      d_b2_old_ = test::random_normal(E_ * c_.h);
      d_b2_d_->upload(d_b2_old_);
    }
  }
  bool bias_dots() const { return c_.bias && c_.bias_dots && !c_.unfused; }
  void launch(cudaStream_t stream) const {
    Fc2DgradArgs args{.dys = dys_d_->view({m_cap_, c_.h}),
                      .w2 = w2_d_->view({E_, c_.h, c_.f}),
                      .offsets = off_d_->view({E_ + 1}),
                      .pre = pre_d_->view({m_cap_, fc1_}),
                      .d_pre = d_pre_d_->view({m_cap_, fc1_}),
                      .activation = c_.act,
                      .scaled_act = act_d_->view({m_cap_, c_.f}),
                      .d_row_scale = dp_d_->view({m_cap_})};
    if (c_.row_scale) args.row_scale = scale_d_->view({m_cap_});
    if (c_.bias) args.b2 = b2_d_->view({E_, c_.h});
    if (c_.d_b2) args.d_b2 = d_b2_d_->view({E_, c_.h});
    args.accumulate_d_b2 = c_.accumulate;
    args.max_ctas = c_.max_ctas;
    const Fc2DgradScratch scratch{
        .dp_partial = partial_d_->view({m_cap_, fc2_dgrad_dp_blocks(c_.f)}),
        .bias_partial = bias_dots()
                            ? bias_partial_d_->view({fc2_dgrad_bias_pieces(c_.h), m_cap_})
                            : TensorView{},
        .g = g_d_->view({m_cap_, c_.f}),
        .d_b2_units = c_.d_b2 ? units_d_->view({fc2_dgrad_d_b2_units(m_cap_, E_), c_.h})
                              : TensorView{}};
    if (c_.unfused) grouped_gemm_fc2_dgrad_unfused(args, scratch, stream);
    else grouped_gemm_fc2_dgrad(args, scratch, stream);
  }
  void check() const {
    const int lo = off_.front(), hi = off_.back();
    for (const auto& [buf, cols, what] :
         {std::tuple{d_pre_d_.get(), fc1_, "d_pre"}, std::tuple{act_d_.get(), c_.f, "scaled_act"},
          std::tuple{dp_d_.get(), int64_t{1}, "dp"}}) {
      const std::string v = untouched(buf->raw(), cols * (dtype_bits(buf->dtype) / 8), m_cap_,
                                      lo, hi, what);
      EXPECT_TRUE(v.empty()) << v;
    }
    const std::vector<float> d_pre = d_pre_d_->download(), act = act_d_->download(),
                             dp = dp_d_->download();
    const MoeConfig config{.hidden = c_.h, .ffn = c_.f, .num_experts = E_, .top_k = 1,
                           .activation = c_.act};
    std::vector<float> got_pre, got_act, got_dp;
    std::vector<double> want_pre, want_act, want_dp;
    std::vector<double> g(c_.f), pre_ref(fc1_), a(c_.f), d_act(c_.f), d_pre_ref(fc1_);
    // The reference's [gate; up] column j lives at the kernel's column col(j).
    auto col = [&](int64_t j) { return glu_ ? glu_interleaved_row(j, c_.f) : j; };
    for (int r : sample_rows(off_, std::clamp<size_t>(size_t(2e9 / double(c_.h * c_.f)), 16, 1024))) {
      const int e = expert_of(off_, r);
      const double p = c_.row_scale ? scale_[r] : 1.0;
      std::fill(g.begin(), g.end(), 0.0);
      for (int64_t q = 0; q < c_.h; ++q) {  // along W2's rows, as in the dgrad check above
        const double dq = dys_[r * c_.h + q];
        const float* w_q = w2_.data() + (e * c_.h + q) * c_.f;
        for (int64_t j = 0; j < c_.f; ++j) g[j] += dq * w_q[j];
      }
      for (int64_t j = 0; j < c_.f; ++j) d_act[j] = p * g[j];
      for (int64_t j = 0; j < fc1_; ++j) pre_ref[j] = pre_[r * fc1_ + col(j)];
      ref::activation_forward(config, pre_ref.data(), a.data());
      ref::activation_backward(config, pre_ref.data(), d_act.data(), d_pre_ref.data());
      double dp_want = 0;
      for (int64_t j = 0; j < c_.f; ++j) dp_want += g[j] * a[j];
      if (c_.bias)
        for (int64_t q = 0; q < c_.h; ++q) dp_want += double(dys_[r * c_.h + q]) * b2_[e * c_.h + q];
      for (int64_t j = 0; j < fc1_; ++j) {
        got_pre.push_back(d_pre[r * fc1_ + col(j)]);
        want_pre.push_back(d_pre_ref[j]);
      }
      for (int64_t j = 0; j < c_.f; ++j) {
        got_act.push_back(act[r * c_.f + j]);
        want_act.push_back(p * a[j]);
      }
      got_dp.push_back(dp[r]);
      want_dp.push_back(dp_want);
    }
    EXPECT_LE(test::rel_norm_error(got_pre, want_pre), 5e-3) << "d_pre";
    EXPECT_LE(test::rel_norm_error(got_act, want_act), 5e-3) << "scaled_act";
    EXPECT_LE(test::rel_norm_error(got_dp, want_dp), 5e-3) << "dp";
    if (c_.d_b2) check_d_b2();
  }

  // d_b2[e] = (old +) Σ_r p[r]·dys[r] over every row of e; an expert without rows keeps the old
  // value bit for bit (0 without accumulate).
  void check_d_b2() const {
    const std::vector<float> got = d_b2_d_->download();
    std::vector<double> want(E_ * c_.h, 0.0);
    for (int e = 0; e < E_; ++e)
      for (int r = off_[e]; r < off_[e + 1]; ++r) {
        const double p = c_.row_scale ? scale_[r] : 1.0;
        for (int64_t q = 0; q < c_.h; ++q) want[e * c_.h + q] += p * dys_[r * c_.h + q];
      }
    for (int e = 0; e < E_; ++e) {
      for (int64_t q = 0; q < c_.h; ++q) {
        const float old = c_.accumulate ? d_b2_old_[e * c_.h + q] : 0.0f;
        if (off_[e] == off_[e + 1])
          ASSERT_EQ(std::bit_cast<uint32_t>(got[e * c_.h + q]), std::bit_cast<uint32_t>(old))
              << "d_b2 of expert " << e << " (no rows), column " << q;
        want[e * c_.h + q] += old;
      }
    }
    EXPECT_LE(test::rel_norm_error(got, want), 1e-5) << "d_b2";
  }

 private:
  Fc2Case c_;
  int E_ = 0;
  bool glu_ = false;
  int64_t fc1_ = 0, m_cap_ = 0;
  std::vector<int> off_;
  std::vector<float> dys_, w2_, pre_, scale_, b2_, d_b2_old_;
  BufferPtr dys_d_, w2_d_, pre_d_, scale_d_, b2_d_, off_d_, d_pre_d_, act_d_, dp_d_, partial_d_,
      bias_partial_d_, d_b2_d_, units_d_, g_d_;
};

void run_fc2(const Fc2Case& c, const std::string& name) {
  SCOPED_TRACE(name + " (seed " + std::to_string(test::seed()) + ")");
  Fc2Runner runner(c);
  runner.launch(nullptr);
  CHECK_CUDA(cudaDeviceSynchronize());
  runner.check();
}

TEST(GroupedGemmBackward, Fc2DgradEveryActivationFusedAndUnfused) {
  MOEFUSE_REQUIRE_HOPPER();
  for (bool unfused : {false, true})
    for (Activation act : {Activation::kSwiGLU, Activation::kGeGLU, Activation::kReGLU,
                           Activation::kClampedSwiGLU, Activation::kSquaredReLU}) {
      // F = 328: two n-blocks (dp partials), a tail; H = 200: a K tail.
      run_fc2({.counts = {0, 5, 127, 129, 300, 0, 64}, .row_base = 2, .spare_rows = 30,
               .h = 200, .f = 328, .act = act, .unfused = unfused},
              std::string(activation_name(act)) + (unfused ? " unfused" : " fused"));
    }
  run_fc2({.counts = {40, 0, 90}, .spare_rows = 3, .row_scale = false, .bias = false},
          "no row scale, no bias");
  // dp's b2 term read by the dp reduction (no bias_partial), d_b2 accumulated, no d_b2; H = 520:
  // three 256-column pieces of the b2 dots, the last a partial one.
  const std::vector<int> counts = {0, 5, 127, 129, 300, 0, 64};
  run_fc2({.counts = counts, .row_base = 2, .spare_rows = 30, .h = 520, .f = 328,
           .bias_dots = false},
          "b2 dots in the dp reduction");
  for (bool unfused : {false, true})
    run_fc2({.counts = counts, .row_base = 2, .spare_rows = 30, .h = 520, .f = 328,
             .unfused = unfused, .accumulate = true},
            unfused ? "d_b2 accumulated, unfused" : "d_b2 accumulated");
  run_fc2({.counts = counts, .h = 520, .f = 328, .d_b2 = false}, "b2 dots without d_b2");
}

// d_b2 and the b2 dots over a skewed load: one expert holding most rows (many 256-row units, the
// last partial), experts of exactly one unit and one row past it, empty ones; accumulated and
// not, fused and unfused.
TEST(GroupedGemmBackward, Fc2DgradBiasSumsOverASkewedLoad) {
  MOEFUSE_REQUIRE_HOPPER();
  static_assert(gemm::bwd::kSegmentRows == 256, "the counts below straddle its units");
  const std::vector<int> counts = {0, 3001, 256, 257, 0, 1, 255};
  for (bool unfused : {false, true})
    for (bool accumulate : {false, true})
      run_fc2({.counts = counts, .row_base = 3, .spare_rows = 40, .h = 520, .f = 200,
               .unfused = unfused, .accumulate = accumulate},
              std::string(unfused ? "unfused" : "fused") +
                  (accumulate ? ", d_b2 accumulated" : ""));
}

// H past config.h's kDgluNarrowMaxK: the fused dGLU runs in the wide shape (256-column tiles,
// three epilogue warps). F = 328: one full n-block and a tail; F = 768: dp sums the wide shape's
// three partials of a row stride of fc2_dgrad_dp_blocks(768) = 4 (the fourth, poisoned, unread).
TEST(GroupedGemmBackward, Fc2DgradWideShapeForALongHidden) {
  MOEFUSE_REQUIRE_HOPPER();
  static_assert(gemm::bwd::dglu_block_n(3200) == gemm::bwd::kBlockN);
  for (Activation act : {Activation::kSwiGLU, Activation::kClampedSwiGLU,
                         Activation::kSquaredReLU})
    run_fc2({.counts = {0, 5, 127, 129, 300, 0, 64}, .row_base = 2, .spare_rows = 30,
             .h = 3200, .f = 328, .act = act},
            std::string(activation_name(act)) + " wide");
  run_fc2({.counts = {0, 5, 127, 129, 300, 0, 64}, .h = 3200, .f = 768, .act = Activation::kGeGLU},
          "GeGLU wide, F 768");
}

// The fused FC2 dgrad's clusters (src/cuda/gemm/cluster_scheduler.h, pairs): m-groups sharing
// B, the left-over m-block's n-groups sharing A, and past the last n-block phantoms (they load
// their piece of A for the others and write nothing): F = 520 is three 192-column n-blocks
// (narrow: one phantom), F = 904 five (one phantom), F = 584 three 256-column ones (wide, H 3200:
// one phantom); the experts hold 1, 2, 3 and 5 m-blocks (odd and even counts). max_ctas 3 and
// 1 run one cluster, which then walks every unit; with H = 48 (one K block a unit) its producer
// runs as many units ahead as there are stages, the tile slots' closest reuse
// (common/tile_slots.cuh).
TEST(GroupedGemmBackward, Fc2DgradClusterGroupsAndPhantoms) {
  MOEFUSE_REQUIRE_HOPPER();
  const std::vector<int> counts = {100, 0, 256, 300, 600, 1};
  for (int max_ctas : {0, 3, 1}) {
    const std::string ctas = ", max_ctas " + std::to_string(max_ctas);
    for (int64_t f : {520, 904})
      run_fc2({.counts = counts, .row_base = 5, .spare_rows = 9, .h = 136, .f = f,
               .max_ctas = max_ctas},
              "narrow, F " + std::to_string(f) + ctas);
    run_fc2({.counts = counts, .spare_rows = 9, .h = 3200, .f = 584, .act = Activation::kGeGLU,
             .max_ctas = max_ctas},
            "wide" + ctas);
    run_fc2({.counts = counts, .row_base = 5, .spare_rows = 9, .h = 48, .f = 904,
             .max_ctas = max_ctas},
            "narrow, one K block" + ctas);
  }
}

// ---- wgrad ---------------------------------------------------------------------------------

struct WgradCase {
  std::vector<int> counts;
  int row_base = 0, spare_rows = 0;
  int64_t m_out = 128, n_out = 256;
  bool fp32 = true, accumulate = false, gather = false, unfused = false;
};

class WgradRunner {
 public:
  explicit WgradRunner(const WgradCase& c) : c_(c) {
    E_ = static_cast<int>(c.counts.size());
    m_cap_ = offsets_of(c.counts, c.row_base).back() + c.spare_rows;
    tokens_ = c.gather ? std::max<int64_t>(1, m_cap_ / 2 + 3) : m_cap_;
    a_d_ = buffer(m_cap_ * c.m_out, DType::kBFloat16);
    b_d_ = buffer(tokens_ * c.n_out, DType::kBFloat16);
    idx_d_ = buffer(m_cap_, DType::kInt32);
    off_d_ = buffer(E_ + 1, DType::kInt32);
    d_d_ = buffer(E_ * c.m_out * c.n_out, c.fp32 ? DType::kFloat32 : DType::kBFloat16);
    gathered_d_ = buffer(m_cap_ * c.n_out, DType::kBFloat16);
    refresh(c.counts);
  }
  void refresh(const std::vector<int>& counts) {
    off_ = offsets_of(counts, c_.row_base);
    ASSERT_LE(off_.back(), m_cap_);
    a_ = random_bf16(m_cap_ * c_.m_out);
    b_ = random_bf16(tokens_ * c_.n_out);
    // Rows outside the experts hold NaN (never read, or zeroed in the tail block).
    for (int64_t r = 0; r < m_cap_; ++r)
      if (r < off_.front() || r >= off_.back())
        for (int64_t j = 0; j < c_.m_out; ++j) a_[r * c_.m_out + j] = NAN;
    if (!c_.gather)
      for (int64_t r = off_.back(); r < m_cap_; ++r)
        for (int64_t j = 0; j < c_.n_out; ++j) b_[r * c_.n_out + j] = NAN;
    index_.assign(m_cap_, -1);
    std::uniform_int_distribution<int> tok(-2, static_cast<int>(tokens_) + 1);  // some invalid
    for (int& t : index_) t = tok(test::rng());
    d0_ = c_.accumulate ? test::random_normal(E_ * c_.m_out * c_.n_out) : std::vector<float>{};
    a_d_->upload(a_), b_d_->upload(b_), idx_d_->upload(index_), off_d_->upload(off_);
    if (c_.accumulate) d_d_->upload(d0_);
    else d_d_->poison();
  }
  void launch(cudaStream_t stream) const {
    GroupedGemmWgradArgs args{.a = a_d_->view({m_cap_, c_.m_out}),
                              .b = b_d_->view({tokens_, c_.n_out}),
                              .offsets = off_d_->view({E_ + 1}),
                              .d = d_d_->view({E_, c_.m_out, c_.n_out}),
                              .accumulate = c_.accumulate};
    if (c_.gather) args.gather_index = idx_d_->view({m_cap_});
    if (c_.unfused)
      grouped_gemm_wgrad_unfused(args, {.gathered_b = gathered_d_->view({m_cap_, c_.n_out})},
                                 stream);
    else grouped_gemm_wgrad(args, stream);
  }
  float b_row(int r, int64_t j) const {
    if (!c_.gather) return b_[r * c_.n_out + j];
    const int t = index_[r];
    return t >= 0 && t < tokens_ ? b_[t * c_.n_out + j] : 0.0f;
  }
  void check() const {
    const std::vector<float> d = d_d_->download();
    const std::vector<uint8_t> raw = d_d_->raw();
    const int64_t per_expert = c_.m_out * c_.n_out;
    std::vector<float> got;
    std::vector<double> want;
    std::uniform_int_distribution<int64_t> pick(0, per_expert - 1);
    for (int e = 0; e < E_; ++e) {
      const int rows = off_[e + 1] - off_[e];
      if (rows == 0 && c_.accumulate) {  // untouched, bit for bit
        EXPECT_EQ(0, std::memcmp(raw.data() + e * per_expert * 4, d0_.data() + e * per_expert,
                                 per_expert * 4))
            << "empty expert " << e << " was written in accumulate mode";
        continue;
      }
      // Every entry's value for small experts, a sample for big ones (about 4e8 MACs).
      const int64_t samples = std::min<int64_t>(per_expert, 400'000'000 / std::max(rows, 1) / E_ + 64);
      for (int64_t s = 0; s < samples; ++s) {
        const int64_t idx = samples == per_expert ? s : pick(test::rng());
        const int64_t m = idx / c_.n_out, n = idx % c_.n_out;
        double acc = c_.accumulate ? d0_[e * per_expert + idx] : 0.0;
        for (int r = off_[e]; r < off_[e + 1]; ++r) acc += double(a_[r * c_.m_out + m]) * b_row(r, n);
        want.push_back(acc);
        got.push_back(d[e * per_expert + idx]);
      }
    }
    EXPECT_LE(test::rel_norm_error(got, want), c_.fp32 ? 1e-4 : 5e-3) << "d";
  }

 private:
  WgradCase c_;
  int E_ = 0;
  int64_t m_cap_ = 0, tokens_ = 0;
  std::vector<int> off_, index_;
  std::vector<float> a_, b_, d0_;
  BufferPtr a_d_, b_d_, idx_d_, off_d_, d_d_, gathered_d_;
};

void run_wgrad(const WgradCase& c, const std::string& name) {
  SCOPED_TRACE(name + " (seed " + std::to_string(test::seed()) + ")");
  WgradRunner runner(c);
  runner.launch(nullptr);
  CHECK_CUDA(cudaDeviceSynchronize());
  runner.check();
}

TEST(GroupedGemmBackward, WgradRaggedKZeroRowsAndAccumulate) {
  MOEFUSE_REQUIRE_HOPPER();
  // M_out = 136, N_out = 328 (tails), rows not multiples of 64, empty experts, NaN after the end.
  const std::vector<int> counts{0, 1, 63, 64, 65, 0, 200, 7};
  run_wgrad({.counts = counts, .row_base = 5, .spare_rows = 50, .m_out = 136, .n_out = 328},
            "fp32");
  run_wgrad({.counts = counts, .spare_rows = 9, .m_out = 136, .n_out = 328, .fp32 = false}, "bf16");
  run_wgrad({.counts = counts, .spare_rows = 9, .m_out = 136, .n_out = 328, .accumulate = true},
            "accumulate");
  run_wgrad({.counts = std::vector<int>(6, 0), .spare_rows = 20}, "no rows: zeros");
  run_wgrad({.counts = std::vector<int>(3, 0), .accumulate = true}, "M_cap = 0, accumulate");
  std::vector<int> hot(8, 0);
  hot[3] = 1500;
  run_wgrad({.counts = hot, .m_out = 256, .n_out = 512}, "one expert holds every row");
}

// Last K blocks of every length around the wgmma K steps (16 rows each): the consumers run only
// the steps holding an expert's rows and zero the rest of the last one; the next expert's rows
// (random) or NaN (past the experts) in the skipped and zeroed rows must not reach D. TMA wgrad
// 256 wide (fp32, bf16) and 192 wide (fp32), the gather wgrad.
TEST(GroupedGemmBackward, WgradLastKBlockStepBoundaries) {
  MOEFUSE_REQUIRE_HOPPER();
  const std::vector<int> counts{16, 17, 32, 33, 48, 49, 64 + 15, 128 + 31, 47};
  run_wgrad({.counts = counts, .row_base = 3, .spare_rows = 40, .m_out = 136, .n_out = 328},
            "fp32");
  run_wgrad({.counts = counts, .spare_rows = 40, .m_out = 136, .n_out = 328, .fp32 = false},
            "bf16");
  run_wgrad({.counts = counts, .spare_rows = 40, .m_out = 136, .n_out = 576}, "narrow fp32");
  run_wgrad({.counts = counts, .spare_rows = 40, .m_out = 256, .n_out = 264, .gather = true},
            "gather");
}

// N_out a multiple of 192 but not of 256 (gpt-oss's 2880): with fp32 D the narrow wgrad, 128 ×
// 192 tiles handed over whole (backward/config.h wgrad_narrow), overwriting and accumulating;
// bf16 D the 256-wide tiles with a tail. A multiple of both (qwen3's dW2, 768): narrow too.
TEST(GroupedGemmBackward, WgradNarrowTilesWholeHandOff) {
  MOEFUSE_REQUIRE_HOPPER();
  const std::vector<int> counts{0, 1, 63, 64, 65, 0, 200, 7};
  run_wgrad({.counts = counts, .row_base = 5, .spare_rows = 50, .m_out = 136, .n_out = 576},
            "narrow fp32");
  run_wgrad({.counts = counts, .spare_rows = 9, .m_out = 136, .n_out = 576, .fp32 = false},
            "bf16, 256-wide");
  run_wgrad({.counts = counts, .spare_rows = 9, .m_out = 136, .n_out = 576, .accumulate = true},
            "narrow accumulate");
  run_wgrad({.counts = counts, .spare_rows = 9, .m_out = 136, .n_out = 768}, "narrow fp32, N 768");
}

// The TMA wgrads walk a skewed load's experts longest first in snake rounds, others in index
// order (backward/wgrad_order.h), the order kept in shared memory: 1024 experts (the most a
// grouped GEMM takes, the order's whole room) with skewed counts and ties, one or two tiles
// each, so every CTA walks about eight rounds, the last one partial; empty experts (sorted last)
// untouched with accumulate; and a near-uniform load of as many experts, in index order.
std::vector<int> skewed_counts(int experts) {
  std::vector<int> counts(experts);
  std::uniform_int_distribution<int> small(0, 6), big(100, 700), coin(0, 15);
  for (int& c : counts) c = coin(test::rng()) == 0 ? big(test::rng()) : small(test::rng());
  counts[experts / 3] = 2000;
  return counts;
}

TEST(GroupedGemmBackward, WgradLongestFirstOverMaxExperts) {
  MOEFUSE_REQUIRE_HOPPER();
  const std::vector<int> counts = skewed_counts(1024);
  run_wgrad({.counts = counts, .row_base = 3, .spare_rows = 20}, "fp32, 1024 experts");
  run_wgrad({.counts = counts, .spare_rows = 20, .accumulate = true}, "accumulate");
  run_wgrad({.counts = counts, .spare_rows = 20, .n_out = 192}, "narrow fp32");
  run_wgrad({.counts = counts, .spare_rows = 20, .n_out = 320, .fp32 = false}, "bf16, 2 tiles");
  std::vector<int> level(1024);
  std::uniform_int_distribution<int> near(20, 30);
  for (int& c : level) c = near(test::rng());
  run_wgrad({.counts = level, .row_base = 1, .spare_rows = 5}, "near-uniform: index order");
}

TEST(GroupedGemmBackward, WgradGatherFusedAndUnfused) {
  MOEFUSE_REQUIRE_HOPPER();
  for (bool unfused : {false, true})
    run_wgrad({.counts = {5, 0, 200, 131, 1, 70}, .row_base = 2, .spare_rows = 9, .m_out = 256,
               .n_out = 264, .accumulate = true, .gather = true, .unfused = unfused},
              unfused ? "unfused gather" : "fused gather");
  // bf16 D (the layer's bf16 expert gradients): the in-consumer epilogue's bf16 store.
  run_wgrad({.counts = {5, 0, 200, 131, 1, 70}, .spare_rows = 9, .m_out = 256, .n_out = 264,
             .fp32 = false, .gather = true},
            "fused gather, bf16");
}

// One case per preset at its real widths: FC1 and FC2 dgrad, the FC2 dgrad epilogue, dW1 and
// dW2. A test per preset, so that the suite (a process per test) runs them side by side: as one
// test they were the suite's longest, 82 s on the H200 machine (run 18), most of it the fp64
// reference. Few experts keep that reference fast: 700 rows over 4 (one full and one partial
// m-block each), and mixtral's 14336-wide FFN 300 rows in one (two full m-blocks and a partial).
class GroupedGemmBackwardPreset : public ::testing::TestWithParam<std::string_view> {};

TEST_P(GroupedGemmBackwardPreset, RealWidths) {
  MOEFUSE_REQUIRE_HOPPER();
  const std::string n(GetParam());
  const MoeConfig p = preset(n);
  const bool wide = p.ffn > 8192;
  const std::vector<int> counts = uniform_counts(wide ? 1 : 4, wide ? 300 : 700);
  run_dgrad({.counts = counts, .spare_rows = 5, .k = p.fc1_width(), .n = p.hidden}, n + " fc1 dgrad");
  run_fc2({.counts = counts, .spare_rows = 5, .h = p.hidden, .f = p.ffn, .act = p.activation,
           .bias = p.expert_bias},
          n + " fc2 dgrad");
  run_wgrad({.counts = counts, .spare_rows = 5, .m_out = p.fc1_width(), .n_out = p.hidden,
             .accumulate = true},
            n + " dW1");
  run_wgrad({.counts = counts, .spare_rows = 5, .m_out = p.hidden, .n_out = p.ffn}, n + " dW2");
}

INSTANTIATE_TEST_SUITE_P(GroupedGemmBackward, GroupedGemmBackwardPreset,
                         ::testing::ValuesIn(preset_names()), [](const auto& info) {
                           std::string name(info.param);
                           std::replace(name.begin(), name.end(), '-', '_');
                           return name;
                         });

// The dgrad's epilogue hand-off (tile buffer, tile_full / tile_empty) and the wgrads' sub-tile
// buffers (slab_tma_store.cuh) walked several times per CTA: more tiles than 3 × 132 SMs, one-
// and two-part hand-offs (bf16 and fp32 outputs), 4 and 8 sub-tiles a slab (bf16 and fp32 D),
// empty experts (skipped with accumulate), row counts not multiples of 128 or 64, M and N tails.
TEST(GroupedGemmBackward, SeveralTilesPerCtaHandOff) {
  MOEFUSE_REQUIRE_HOPPER();
  std::vector<int> rows = uniform_counts(12, 20000);  // about 165 m-blocks × 3 n-blocks
  rows[4] = 0;
  rows[7] += 77;
  for (bool fp32 : {false, true})
    run_dgrad({.counts = rows, .row_base = 3, .spare_rows = 21, .k = 200, .n = 520, .fp32 = fp32},
              fp32 ? "dgrad fp32 (two parts)" : "dgrad bf16 (one part)");
  run_dgrad({.counts = rows, .row_base = 3, .spare_rows = 21, .k = 200, .n = 576},
            "dgrad bf16, narrow tiles");
  for (Activation act : {Activation::kSwiGLU, Activation::kSquaredReLU})
    run_fc2({.counts = rows, .row_base = 1, .spare_rows = 9, .h = 136, .f = 520, .act = act},
            std::string("fc2 dgrad ") + std::string(activation_name(act)));
  std::vector<int> small = uniform_counts(48, 2500);  // 48 experts × 3 × 3 tiles
  small[0] = small[17] = small[47] = 0;
  run_wgrad({.counts = small, .row_base = 2, .spare_rows = 11, .m_out = 264, .n_out = 520},
            "wgrad fp32");
  run_wgrad({.counts = small, .spare_rows = 11, .m_out = 264, .n_out = 520, .fp32 = false},
            "wgrad bf16");
  run_wgrad({.counts = small, .spare_rows = 11, .m_out = 264, .n_out = 520, .accumulate = true},
            "wgrad accumulate");
  // fp32 D at N_out 576: 128 × 192 tiles, whole in one hand-off.
  run_wgrad({.counts = small, .spare_rows = 11, .m_out = 264, .n_out = 576}, "narrow wgrad fp32");
  run_wgrad({.counts = small, .spare_rows = 11, .m_out = 264, .n_out = 576, .accumulate = true},
            "narrow wgrad accumulate");
}

TEST(GroupedGemmBackward, GraphReplayReadsNewOffsetsAndData) {
  MOEFUSE_REQUIRE_HOPPER();
  Fc2Runner fc2({.counts = {100, 0, 300, 57}, .spare_rows = 200, .f = 264,
                 .act = Activation::kClampedSwiGLU});
  WgradRunner wgrad({.counts = {100, 0, 300, 57}, .spare_rows = 200, .n_out = 264});
  cudaStream_t stream;
  CHECK_CUDA(cudaStreamCreate(&stream));
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  CHECK_CUDA(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
  fc2.launch(stream);
  wgrad.launch(stream);
  CHECK_CUDA(cudaStreamEndCapture(stream, &graph));
  CHECK_CUDA(cudaGraphInstantiate(&exec, graph, 0));
  for (const std::vector<int>& counts :
       std::vector<std::vector<int>>{{0, 400, 0, 257}, {600, 1, 2, 3}, {0, 0, 0, 0}}) {
    SCOPED_TRACE("counts " + std::to_string(counts[0]) + "," + std::to_string(counts[1]) + "," +
                 std::to_string(counts[2]) + "," + std::to_string(counts[3]));
    fc2.refresh(counts);
    wgrad.refresh(counts);
    CHECK_CUDA(cudaDeviceSynchronize());
    CHECK_CUDA(cudaGraphLaunch(exec, stream));
    CHECK_CUDA(cudaStreamSynchronize(stream));
    fc2.check();
    wgrad.check();
  }
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaStreamDestroy(stream);
}

}  // namespace
}  // namespace moefuse
