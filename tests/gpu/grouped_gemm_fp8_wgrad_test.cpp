// The column-wise grouped FP8 quantiser and the FP8 k-grouped wgrad on the GPU against their CPU
// references (src/ref/grouped_gemm_fp8_wgrad.h).
//
// Operands: fresh random bf16 x_a [M_cap, N_a], x_b [M_cap, N_b]; the rows outside
// [offsets[0], offsets[E]) hold NaN (neither op may read them). The quantiser (and its gather
// form, from x_b's rows scattered over token order) must match the reference bit for bit on
// every group below group_start[E] (the first mismatch names group, expert, feature and row);
// the wgrad runs on the reference-quantised operands (so a quantiser bug cannot hide a GEMM
// bug) and is compared per expert. The row+column form (quantize_fp8_rowcol_grouped) on
// operand a: its column-wise copy bit for bit the reference's, its row-wise copy bit for bit the
// 1x128 reference's on the experts' rows, the other rows and their scales left as poisoned. The
// wgrad is compared per expert: rel-norm <= 1e-3 (DeepGEMM's bar for FP8 GEMMs, fp32
// output), the worst element named. Empty experts: exactly +0, or with accumulate the old D bit
// for bit. Big shapes compare a sample of D's rows (all columns).
#include <gtest/gtest.h>

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "common/test_util.h"
#include "dispatch_test_util.h"
#include "moefuse/grouped_gemm_fp8_wgrad.h"
#include "ref/grouped_gemm_fp8_wgrad.h"
#include "ref/quant.h"

namespace moefuse {
namespace {

using test::DeviceBuffer;
using test::host_view;

struct Case {
  std::vector<int> counts;
  int row_base = 0, spare_rows = 0;
  int64_t n_a = 256, n_b = 256;
  bool accumulate = false;
};

// One operand: bf16 x, its reference quantisation, device copies.
struct Operand {
  int64_t n = 0, groups = 0;
  std::vector<float> x;  // bf16-rounded, NaN outside the experts
  std::vector<uint8_t> xt;
  std::vector<float> scales;
  std::unique_ptr<DeviceBuffer<test::Bf16>> x_dev;
  std::unique_ptr<DeviceBuffer<uint8_t>> xt_dev;
  std::unique_ptr<DeviceBuffer<float>> scales_dev;

  Operand(std::vector<int32_t>& off, int64_t m_cap, int64_t n_) : n(n_) {
    const int64_t experts = int64_t(off.size()) - 1;
    groups = fp8_colwise_groups(m_cap, experts);
    x = test::bf16_rounded(test::random_normal(m_cap * n));
    for (int64_t r = 0; r < m_cap; ++r)
      if (r < off.front() || r >= off.back())
        std::fill(x.begin() + r * n, x.begin() + (r + 1) * n, NAN);
    xt.assign(n * groups * 128, 0);
    scales.assign(groups * n, 1.0f);
    ref::quantize_fp8_colwise_grouped(host_view(x, DType::kFloat32, {m_cap, n}),
                                      host_view(off, DType::kInt32, {experts + 1}),
                                      host_view(xt, DType::kFloat8E4M3, {n, groups * 128}),
                                      host_view(scales, DType::kFloat32, {groups, n}));
    x_dev = std::make_unique<DeviceBuffer<test::Bf16>>(test::to_bf16(x));
    xt_dev = std::make_unique<DeviceBuffer<uint8_t>>(xt);
    scales_dev = std::make_unique<DeviceBuffer<float>>(scales);
  }
};

class Runner {
 public:
  explicit Runner(const Case& c) : c_(c) {
    experts_ = int64_t(c.counts.size());
    off_.assign(experts_ + 1, c.row_base);
    for (int64_t e = 0; e < experts_; ++e) off_[e + 1] = off_[e] + c.counts[e];
    m_cap_ = off_.back() + c.spare_rows;
    for (int64_t e = 0; e < experts_; ++e) total_groups_ += (c.counts[e] + 127) / 128;
    a_ = std::make_unique<Operand>(off_, m_cap_, c.n_a);
    b_ = std::make_unique<Operand>(off_, m_cap_, c.n_b);
    off_dev_ = std::make_unique<DeviceBuffer<int32_t>>(off_);
    old_d_ = test::random_normal(experts_ * c.n_a * c.n_b);
    d_dev_ = std::make_unique<DeviceBuffer<float>>(old_d_.size());
  }

  GroupedGemmFp8WgradArgs args() const {
    const int64_t g = a_->groups;
    return {.at = a_->xt_dev->view(DType::kFloat8E4M3, {c_.n_a, g * 128}),
            .a_scales = a_->scales_dev->view(DType::kFloat32, {g, c_.n_a}),
            .bt = b_->xt_dev->view(DType::kFloat8E4M3, {c_.n_b, g * 128}),
            .b_scales = b_->scales_dev->view(DType::kFloat32, {g, c_.n_b}),
            .offsets = off_dev_->view(DType::kInt32, {experts_ + 1}),
            .d = d_dev_->view(DType::kFloat32, {experts_, c_.n_a, c_.n_b}),
            .accumulate = c_.accumulate};
  }

  // D poisoned with NaN, or holding old_d_ with accumulate; then the kernel.
  std::vector<float> run_wgrad() {
    if (c_.accumulate) d_dev_->upload(old_d_);
    else d_dev_->poison();
    grouped_gemm_fp8_wgrad(args(), nullptr);
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    return d_dev_->download();
  }

  void check_wgrad(const std::vector<float>& d) const {
    const int64_t per = c_.n_a * c_.n_b;
    const std::vector<int> rows = rows_to_check();
    const std::vector<float> want_all = reference(rows);
    const int64_t want_per = int64_t(rows.size()) * c_.n_b;
    for (int64_t e = 0; e < experts_; ++e) {
      SCOPED_TRACE("expert " + std::to_string(e) + " (" + std::to_string(c_.counts[e]) + " rows)");
      const std::vector<float> got(d.begin() + e * per, d.begin() + (e + 1) * per);
      if (c_.counts[e] == 0) {
        const std::vector<float> want = c_.accumulate
            ? std::vector<float>(old_d_.begin() + e * per, old_d_.begin() + (e + 1) * per)
            : std::vector<float>(per, 0.0f);
        EXPECT_TRUE(test::same_bits(got, want, "empty expert's D"));
        continue;
      }
      for (int64_t i = 0; i < per; ++i)
        ASSERT_FALSE(std::isnan(got[i])) << "D[" << i / c_.n_b << ", " << i % c_.n_b
                                         << "] not written";
      const std::vector<float> want(want_all.begin() + e * want_per,
                                    want_all.begin() + (e + 1) * want_per);
      std::vector<float> got_rows;
      for (int i : rows)
        got_rows.insert(got_rows.end(), got.begin() + i * c_.n_b, got.begin() + (i + 1) * c_.n_b);
      EXPECT_LE(test::rel_norm_error(got_rows, want), 1e-3) << worst(rows, got_rows, want);
    }
  }

  // The GPU quantiser on both operands, bit for bit against the reference's.
  void check_quantiser() const {
    for (const Operand* op : {a_.get(), b_.get()}) {
      DeviceBuffer<uint8_t> xt(op->xt.size());
      DeviceBuffer<float> scales(op->scales.size());
      xt.poison();
      scales.poison();
      quantize_fp8_colwise_grouped(op->x_dev->view(DType::kBFloat16, {m_cap_, op->n}),
                                   off_dev_->view(DType::kInt32, {experts_ + 1}),
                                   xt.view(DType::kFloat8E4M3, {op->n, op->groups * 128}),
                                   scales.view(DType::kFloat32, {op->groups, op->n}), nullptr);
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      expect_same_quantisation(xt.download(), scales.download(), op->xt, op->scales, op->n,
                               op->groups);
    }
  }

  // The row+column form on operand a: both copies from one pass (see the file comment).
  void check_rowcol_quantiser() const {
    const Operand& op = *a_;
    const int64_t n = op.n, groups_n = fp8_scale_groups(n), cols = fp8_scale_rows(m_cap_);
    DeviceBuffer<uint8_t> xt(op.xt.size()), q_rows(m_cap_ * n);
    DeviceBuffer<float> scales(op.scales.size()), q_rows_scales(groups_n * cols);
    for (auto* b : {&xt, &q_rows}) b->poison();
    for (auto* b : {&scales, &q_rows_scales}) b->poison();
    quantize_fp8_rowcol_grouped(op.x_dev->view(DType::kBFloat16, {m_cap_, n}),
                                off_dev_->view(DType::kInt32, {experts_ + 1}),
                                xt.view(DType::kFloat8E4M3, {n, op.groups * 128}),
                                scales.view(DType::kFloat32, {op.groups, n}),
                                q_rows.view(DType::kFloat8E4M3, {m_cap_, n}),
                                q_rows_scales.view(DType::kFloat32, {groups_n, cols}), nullptr);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    expect_same_quantisation(xt.download(), scales.download(), op.xt, op.scales, n, op.groups);
    // The 1x128 reference on the experts' rows (the others hold NaN in x).
    const int64_t first = off_.front(), rows = off_.back() - first;
    std::vector<float> x_rows(op.x.begin() + first * n, op.x.begin() + (first + rows) * n);
    std::vector<uint8_t> want_q(rows * n);
    std::vector<float> want_s(rows * groups_n);
    ref::quantize_fp8_blockwise_1x128(host_view(x_rows, DType::kFloat32, {rows, n}),
                                      host_view(want_q, DType::kFloat8E4M3, {rows, n}),
                                      host_view(want_s, DType::kFloat32, {rows, groups_n}));
    const std::vector<uint8_t> q = q_rows.download();
    const std::vector<float> s = q_rows_scales.download();
    for (int64_t r = 0; r < m_cap_; ++r) {
      const bool expert_row = r >= first && r < first + rows;
      for (int64_t j = 0; j < n; ++j) {
        const uint8_t want = expert_row ? want_q[(r - first) * n + j] : 0xFF;
        ASSERT_EQ(q[r * n + j], want) << "row " << r << ", column " << j << ": code "
                                      << +q[r * n + j] << ", want " << +want
                                      << (expert_row ? "" : " (unwritten)");
      }
      for (int64_t g = 0; g < groups_n; ++g) {
        const float got = s[g * cols + r];
        if (!expert_row) {
          ASSERT_TRUE(std::isnan(got)) << "row " << r << "'s scale " << g << " written: " << got;
          continue;
        }
        const float want = want_s[(r - first) * groups_n + g];
        ASSERT_EQ(std::memcmp(&got, &want, 4), 0)
            << "row " << r << ", scale group " << g << ": " << got << ", want " << want;
      }
    }
  }

  // The gather form on operand b's rows scattered over T = M_cap + 5 token rows (a random
  // permutation), about one expert row in 16 given an index outside [0, T) (-1 or past T): bit
  // for bit the reference's quantisation of the gathered rows, those rows zeros.
  void check_gather_quantiser() const {
    const Operand& op = *b_;
    const int64_t tokens = m_cap_ + 5, n = op.n;
    std::vector<int32_t> perm(tokens), index(m_cap_);
    for (int64_t t = 0; t < tokens; ++t) perm[t] = int32_t(t);
    std::shuffle(perm.begin(), perm.end(), test::rng());
    std::vector<float> x_tok = test::bf16_rounded(test::random_normal(tokens * n));
    std::vector<float> gathered = op.x;  // the rows the gather must produce
    std::uniform_int_distribution<int> pick(0, 15);
    for (int64_t r = 0; r < m_cap_; ++r) {
      index[r] = perm[r];
      if (pick(test::rng()) == 0) {
        index[r] = pick(test::rng()) % 2 ? -1 : int32_t(tokens + r % 3);
        if (r >= off_.front() && r < off_.back())
          std::fill(gathered.begin() + r * n, gathered.begin() + (r + 1) * n, 0.0f);
        continue;
      }
      std::copy(op.x.begin() + r * n, op.x.begin() + (r + 1) * n, x_tok.begin() + perm[r] * n);
    }
    std::vector<uint8_t> want_xt(op.xt.size(), 0);
    std::vector<float> want_scales(op.scales.size(), 1.0f);
    std::vector<int32_t> off = off_;
    ref::quantize_fp8_colwise_grouped(host_view(gathered, DType::kFloat32, {m_cap_, n}),
                                      host_view(off, DType::kInt32, {experts_ + 1}),
                                      host_view(want_xt, DType::kFloat8E4M3, {n, op.groups * 128}),
                                      host_view(want_scales, DType::kFloat32, {op.groups, n}));
    DeviceBuffer<test::Bf16> x_dev(test::to_bf16(x_tok));
    DeviceBuffer<int32_t> index_dev(index);
    DeviceBuffer<uint8_t> xt(op.xt.size());
    DeviceBuffer<float> scales(op.scales.size());
    xt.poison();
    scales.poison();
    quantize_fp8_colwise_grouped_gather(x_dev.view(DType::kBFloat16, {tokens, n}),
                                        index_dev.view(DType::kInt32, {m_cap_}),
                                        off_dev_->view(DType::kInt32, {experts_ + 1}),
                                        xt.view(DType::kFloat8E4M3, {n, op.groups * 128}),
                                        scales.view(DType::kFloat32, {op.groups, n}), nullptr);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    expect_same_quantisation(xt.download(), scales.download(), want_xt, want_scales, n,
                             op.groups);
  }

 private:
  // Codes and scales of every group below group_start[E], the first mismatch named.
  void expect_same_quantisation(const std::vector<uint8_t>& q, const std::vector<float>& s,
                                const std::vector<uint8_t>& want_q,
                                const std::vector<float>& want_s, int64_t n,
                                int64_t groups) const {
    for (int64_t g = 0; g < total_groups_; ++g) {
      for (int64_t j = 0; j < n; ++j) {
        ASSERT_EQ(std::memcmp(&s[g * n + j], &want_s[g * n + j], 4), 0)
            << where(g, j, -1) << ": scale " << s[g * n + j] << ", want " << want_s[g * n + j];
        for (int c = 0; c < 128; ++c) {
          const int64_t at = j * groups * 128 + g * 128 + c;
          ASSERT_EQ(q[at], want_q[at])
              << where(g, j, c) << ": code " << +q[at] << ", want " << +want_q[at];
        }
      }
    }
  }

  std::string where(int64_t g, int64_t feature, int c) const {
    int e = 0, first = 0;
    while ((c_.counts[e] + 127) / 128 + first <= g) first += (c_.counts[e] + 127) / 128, ++e;
    return "group " + std::to_string(g) + " (expert " + std::to_string(e) + ", its group " +
           std::to_string(g - first) + "), feature " + std::to_string(feature) +
           (c < 0 ? "" : ", row " + std::to_string(c) + " of the group");
  }

  // Every row of D when the reference is cheap, else the tile edges and a sample.
  std::vector<int> rows_to_check() const {
    const int64_t rows_total = off_.back() - off_.front();
    std::vector<int> rows;
    if (rows_total * c_.n_a * c_.n_b <= 200'000'000) {
      for (int i = 0; i < c_.n_a; ++i) rows.push_back(i);
      return rows;
    }
    for (int i = 0; i < c_.n_a; i += 64) rows.push_back(i), rows.push_back(i + 63);
    rows.push_back(int(c_.n_a) - 1);
    std::uniform_int_distribution<int> pick(0, int(c_.n_a) - 1);
    for (int k = 0; k < 16; ++k) rows.push_back(pick(test::rng()));
    std::sort(rows.begin(), rows.end());
    rows.erase(std::unique(rows.begin(), rows.end()), rows.end());
    rows.erase(std::remove_if(rows.begin(), rows.end(), [&](int i) { return i >= c_.n_a; }),
               rows.end());
    return rows;
  }

  // Rows `rows` of every D[e] from the reference, [E, rows.size(), N_b], on a compact problem:
  // those rows of at and a_scales (padded with copies of the first to a multiple of 8, the
  // reference's N_a rule; the padding rows are dropped).
  std::vector<float> reference(const std::vector<int>& wanted) const {
    std::vector<int> rows = wanted;
    while (rows.size() % 8 != 0) rows.push_back(rows.front());
    const int64_t s = int64_t(rows.size()), g = a_->groups, cols = g * 128;
    std::vector<uint8_t> at(s * cols);
    std::vector<float> sa(g * s);
    for (int64_t k = 0; k < s; ++k) {
      std::copy(a_->xt.begin() + rows[k] * cols, a_->xt.begin() + (rows[k] + 1) * cols,
                at.begin() + k * cols);
      for (int64_t gg = 0; gg < g; ++gg) sa[gg * s + k] = a_->scales[gg * c_.n_a + rows[k]];
    }
    std::vector<int32_t> off = off_;
    std::vector<float> d(experts_ * s * c_.n_b);
    for (int64_t i = 0; i < experts_ * s * c_.n_b; ++i) {
      const int64_t ee = i / (s * c_.n_b), k = (i / c_.n_b) % s, j = i % c_.n_b;
      d[i] = old_d_[(ee * c_.n_a + rows[k]) * c_.n_b + j];
    }
    auto bt = const_cast<uint8_t*>(b_->xt.data());
    auto sb = const_cast<float*>(b_->scales.data());
    ref::grouped_gemm_fp8_wgrad({.at = host_view(at, DType::kFloat8E4M3, {s, cols}),
                                 .a_scales = host_view(sa, DType::kFloat32, {g, s}),
                                 .bt = TensorView::contiguous(bt, DType::kFloat8E4M3,
                                                              {c_.n_b, cols}),
                                 .b_scales = TensorView::contiguous(sb, DType::kFloat32,
                                                                    {g, c_.n_b}),
                                 .offsets = host_view(off, DType::kInt32, {experts_ + 1}),
                                 .d = host_view(d, DType::kFloat32, {experts_, s, c_.n_b}),
                                 .accumulate = c_.accumulate});
    std::vector<float> out;
    for (int64_t e = 0; e < experts_; ++e)
      out.insert(out.end(), d.begin() + e * s * c_.n_b,
                 d.begin() + (e * s + int64_t(wanted.size())) * c_.n_b);
    return out;
  }

  std::string worst(const std::vector<int>& rows, const std::vector<float>& got,
                    const std::vector<float>& want) const {
    const auto [at, max_diff] = test::max_abs_diff(got, want);
    if (got.empty()) return "nothing compared";
    return "max |diff| " + std::to_string(max_diff) + " at D[" + std::to_string(rows[at / c_.n_b]) +
           ", " + std::to_string(at % c_.n_b) + "]: got " + std::to_string(got[at]) + ", want " +
           std::to_string(want[at]);
  }

  Case c_;
  int64_t experts_ = 0, m_cap_ = 0, total_groups_ = 0;
  std::vector<int32_t> off_;
  std::vector<float> old_d_;
  std::unique_ptr<Operand> a_, b_;
  std::unique_ptr<DeviceBuffer<int32_t>> off_dev_;
  std::unique_ptr<DeviceBuffer<float>> d_dev_;
};

void run_case(const Case& c, const std::string& name) {
  SCOPED_TRACE(name + " (seed " + std::to_string(test::seed()) + ")");
  Runner runner(c);
  runner.check_quantiser();
  runner.check_rowcol_quantiser();
  runner.check_gather_quantiser();
  runner.check_wgrad(runner.run_wgrad());
}

TEST(GroupedGemmFp8Wgrad, RaggedExpertsWithEmptyOnesAndTails) {
  MOEFUSE_REQUIRE_HOPPER();
  // Rows not multiples of 128 (1, 127, 129, 257), empty experts, rows before and after the
  // experts (NaN there), N_a = 200 and N_b = 136: partial tiles in both output dimensions.
  run_case({.counts = {0, 1, 127, 129, 300, 0, 64, 257}, .row_base = 3, .spare_rows = 70,
            .n_a = 200, .n_b = 136},
           "ragged, overwrite");
}

TEST(GroupedGemmFp8Wgrad, AccumulateLeavesEmptyExpertsUntouched) {
  MOEFUSE_REQUIRE_HOPPER();
  run_case({.counts = {300, 0, 5, 0, 640}, .spare_rows = 3, .n_a = 136, .n_b = 264,
            .accumulate = true},
           "ragged, accumulate");
}

TEST(GroupedGemmFp8Wgrad, SmallFeaturesAndOneRow) {
  MOEFUSE_REQUIRE_HOPPER();
  run_case({.counts = {1}, .n_a = 8, .n_b = 16}, "one row, N 8 x 16");
  run_case({.counts = {0, 0, 0}, .spare_rows = 5, .n_a = 16, .n_b = 8}, "all experts empty");
  run_case({.counts = {0}, .n_a = 16, .n_b = 8}, "M_cap = 0");
}

// Experts of more than 768 rows on average drain each tile by per-row bulk copies, shorter ones
// by TMA tensor stores of swizzled chunks (wgrad_config.h drains_by_tensor_stores; the cases
// above and the accumulating ones below are short, DeepSeekDw2Shape is long): this one holds the
// row copies, overwrite and accumulate, with partial tiles, a short and an empty expert.
TEST(GroupedGemmFp8Wgrad, LongExpertsDrainTheTileByRows) {
  MOEFUSE_REQUIRE_HOPPER();
  for (bool accumulate : {false, true})
    run_case({.counts = {1000, 0, 1700, 131}, .row_base = 1, .spare_rows = 9, .n_a = 200,
              .n_b = 136, .accumulate = accumulate},
             accumulate ? "long experts, accumulate" : "long experts, overwrite");
}

// The epilogue hand-off walked several times per CTA: 48 experts × 3 × 5 tiles = 720 tiles, about
// 5.5 per CTA on a 132-SM H200, so tile_full / tile_empty wrap their phases many times; with
// accumulate, the empty experts' tiles (skipped by consumers and epilogue warps alike) fall
// between handed-off ones. A mismatch in the skip rule hangs here or writes the wrong expert.
TEST(GroupedGemmFp8Wgrad, SeveralTilesPerCtaWithEmptyExperts) {
  MOEFUSE_REQUIRE_HOPPER();
  std::vector<int> counts(48, 0);
  std::uniform_int_distribution<int> pick(0, 47);
  for (int i = 0; i < 2500; ++i) ++counts[pick(test::rng())];
  counts[0] = counts[17] = counts[18] = counts[47] = 0;
  for (bool accumulate : {false, true})
    run_case({.counts = counts, .row_base = 2, .spare_rows = 11, .n_a = 264, .n_b = 520,
              .accumulate = accumulate},
             accumulate ? "720 tiles, accumulate" : "720 tiles, overwrite");
}

// A skewed load's experts longest first in snake rounds, others in index order
// (bwd/wgrad_order.h), the order behind group_start in shared memory: 1024 experts (the most
// allowed, the layout's whole room) with skewed counts and ties, one tile each, so every CTA
// walks about eight rounds, the last one partial; and a near-uniform load (index order).
TEST(GroupedGemmFp8Wgrad, LongestFirstOverMaxExperts) {
  MOEFUSE_REQUIRE_HOPPER();
  std::vector<int> counts(1024);
  std::uniform_int_distribution<int> small(0, 6), big(100, 500), coin(0, 15);
  for (int& c : counts) c = coin(test::rng()) == 0 ? big(test::rng()) : small(test::rng());
  counts[300] = 1500;
  for (bool accumulate : {false, true})
    run_case({.counts = counts, .spare_rows = 7, .n_a = 128, .n_b = 120, .accumulate = accumulate},
             accumulate ? "1024 experts, accumulate" : "1024 experts, overwrite");
  std::uniform_int_distribution<int> near(100, 140);
  for (int& c : counts) c = near(test::rng());
  run_case({.counts = counts, .spare_rows = 7, .n_a = 128, .n_b = 120}, "near-uniform");
}

// dW2 of the deepseek-v3 slice: N_a = H = 7168, N_b = F = 2048, skewed ragged experts.
TEST(GroupedGemmFp8Wgrad, DeepSeekDw2Shape) {
  MOEFUSE_REQUIRE_HOPPER();
  run_case({.counts = {1000, 777, 0, 1301}, .spare_rows = 5, .n_a = 7168, .n_b = 2048},
           "deepseek dW2");
}

// d in bf16: the fp32 result rounded once to nearest even, bit for bit (the same accumulation,
// rounded in the hand-off), empty experts +0, every element written (poisoned first); through
// both drains: short experts (tensor stores of 64-column chunks) and long ones (row copies).
TEST(GroupedGemmFp8Wgrad, Bf16OutputIsTheFp32OneRounded) {
  MOEFUSE_REQUIRE_HOPPER();
  for (const Case& c : {Case{.counts = {0, 1, 127, 129, 300, 0, 64, 257}, .row_base = 3,
                             .spare_rows = 70, .n_a = 200, .n_b = 136},
                        Case{.counts = {1000, 0, 1700, 131}, .row_base = 1, .spare_rows = 9,
                             .n_a = 200, .n_b = 136}}) {
    SCOPED_TRACE(std::to_string(c.counts.size()) + " experts");
    Runner runner(c);
    const std::vector<float> fp32 = runner.run_wgrad();
    GroupedGemmFp8WgradArgs args = runner.args();
    DeviceBuffer<test::Bf16> d(fp32.size());
    d.poison();
    args.d = d.view(DType::kBFloat16, {args.d.size(0), args.d.size(1), args.d.size(2)});
    grouped_gemm_fp8_wgrad(args, nullptr);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    EXPECT_TRUE(test::same_bits(test::from_bf16(d.download()),
                                test::from_bf16(test::to_bf16(fp32)), "bf16 d vs the fp32 one"));
  }
}

TEST(GroupedGemmFp8Wgrad, BitwiseRepeatable) {
  MOEFUSE_REQUIRE_HOPPER();
  Runner runner({.counts = {400, 0, 129, 1000}, .n_a = 384, .n_b = 512});
  const std::vector<float> first = runner.run_wgrad();
  EXPECT_TRUE(test::same_bits(runner.run_wgrad(), first, "second run's D"));
}

}  // namespace
}  // namespace moefuse
