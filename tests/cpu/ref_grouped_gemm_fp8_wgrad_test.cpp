// The column-wise grouped FP8 layout and the FP8 k-grouped wgrad on the CPU:
// - the group indexing of src/cuda/gemm/fp8/colwise_groups.h (shared by the GPU quantiser and
//   the GEMM) against brute force, and the capacity bound fp8_colwise_groups;
// - the reference quantiser against an independent path: each expert's rows transposed and
//   quantised by the row-wise 1x128 reference (bit for bit, padding zeros);
// - the reference wgrad against the fp64 matmul of ref/gemm.h on the row-wise reference's
//   dequantised operands, in overwrite and accumulate mode, with empty experts;
// - every validation error of both operations (the GPU entry points validate before any CUDA
//   call, so they run here too).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "common/fp8_operands.h"
#include "common/test_util.h"
#include "cuda/gemm/fp8/colwise_groups.h"
#include "moefuse/grouped_gemm_fp8_wgrad.h"
#include "ref/bf16_bits.h"
#include "ref/gemm.h"
#include "ref/grouped_gemm_fp8_wgrad.h"
#include "ref/quant.h"
#include "ref_test_helpers.h"

namespace moefuse {
namespace {

using test::expect_invalid;
using test::f32;
using test::i32;

TensorView e4m3(std::vector<uint8_t>& v, std::initializer_list<int64_t> shape) {
  return TensorView::contiguous(v.data(), DType::kFloat8E4M3, shape);
}

using test::offsets_of;

std::vector<int> random_counts(int experts, int max_rows) {
  std::uniform_int_distribution<int> pick(0, max_rows), zero(0, 3);
  std::vector<int> c(experts);
  for (int& v : c) v = zero(test::rng()) == 0 ? 0 : pick(test::rng());
  return c;
}

TEST(Fp8ColwiseGroups, IndexingMatchesBruteForce) {
  for (int trial = 0; trial < 50; ++trial) {
    std::uniform_int_distribution<int> experts_pick(1, 40), base_pick(0, 5);
    const int experts = experts_pick(test::rng());
    const std::vector<int32_t> off = offsets_of(random_counts(experts, 400), base_pick(test::rng()));
    std::vector<int> start(experts + 1);
    gemm::tile_starts(off.data(), experts, gemm::fp8::colwise_group_shape(), start.data());
    // Brute force: walk the rows, numbering each expert's groups after the previous expert's.
    int next_group = 0;
    for (int e = 0; e < experts; ++e) {
      ASSERT_EQ(start[e], next_group) << "expert " << e;
      for (int r = off[e]; r < off[e + 1]; ++r) {
        const int local = r - off[e], g = next_group + local / 128;
        ASSERT_EQ(gemm::fp8::colwise_column(r, e, off.data(), start.data()),
                  128 * g + local % 128) << "row " << r;
        const gemm::fp8::ColwiseGroup grp =
            gemm::fp8::colwise_group(g, off.data(), start.data(), experts);
        ASSERT_EQ(grp.expert, e) << "group " << g;
        ASSERT_EQ(grp.group, local / 128) << "group " << g;
        ASSERT_EQ(grp.first_row, off[e] + 128 * (local / 128)) << "group " << g;
        ASSERT_EQ(grp.rows, std::min(128, off[e + 1] - grp.first_row)) << "group " << g;
      }
      next_group += (off[e + 1] - off[e] + 127) / 128;
    }
    ASSERT_EQ(start[experts], next_group);
    EXPECT_LE(next_group, fp8_colwise_groups(off[experts], experts));
  }
}

TEST(Fp8ColwiseGroups, CapacityIsTight) {
  // One row per expert is the worst case: E groups for E rows.
  EXPECT_EQ(fp8_colwise_groups(7, 7), 7);
  EXPECT_EQ(fp8_colwise_groups(0, 1), 0);
  EXPECT_EQ(fp8_colwise_groups(129, 1), 2);
  // 3 experts of 129 rows: 6 groups; the bound for 387 rows is (387 + 381) / 128 = 6.
  EXPECT_EQ(fp8_colwise_groups(387, 3), 6);
}

// A problem's column-wise operand: random x [m_cap, n], quantised by the reference.
struct Operand {
  int64_t m_cap, n, groups;
  std::vector<float> x, scales;
  std::vector<uint8_t> xt;

  Operand(const std::vector<int32_t>& off, int64_t m_cap_, int64_t n_)
      : m_cap(m_cap_), n(n_), groups(fp8_colwise_groups(m_cap_, int64_t(off.size()) - 1)) {
    x = test::random_normal(m_cap * n);
    // An all-zero column group in the first expert with rows (scale 1, codes 0).
    for (size_t e = 0; e + 1 < off.size(); ++e)
      if (off[e + 1] > off[e]) {
        for (int r = off[e]; r < std::min(off[e + 1], off[e] + 128); ++r) x[r * n + 1] = 0.0f;
        break;
      }
    xt.assign(n * groups * 128, 0xAB);  // padding must be overwritten with zeros
    scales.assign(groups * n, -1.0f);
    auto o = const_cast<int32_t*>(off.data());
    ref::quantize_fp8_colwise_grouped(
        f32(x, {m_cap, n}),
        TensorView::contiguous(o, DType::kInt32, {int64_t(off.size())}),
        e4m3(xt, {n, groups * 128}), f32(scales, {groups, n}));
  }
};

// Expert e's rows of x, transposed [n, m_e] and quantised row-wise (1x128 along m_e).
struct ExpertRowwise {
  std::vector<uint8_t> q;
  std::vector<float> scales, deq;  // deq [n, m_e]
};
ExpertRowwise rowwise_of_transpose(const Operand& op, int first, int rows) {
  const int64_t n = op.n, groups = (rows + 127) / 128;
  std::vector<float> t(n * rows);
  for (int r = 0; r < rows; ++r)
    for (int64_t j = 0; j < n; ++j) t[j * rows + r] = op.x[(first + r) * n + j];
  ExpertRowwise out{.q = std::vector<uint8_t>(n * rows),
                    .scales = std::vector<float>(n * groups),
                    .deq = std::vector<float>(n * rows)};
  ref::quantize_fp8_blockwise_1x128(f32(t, {n, rows}), e4m3(out.q, {n, rows}),
                                    f32(out.scales, {n, groups}));
  ref::dequantize_fp8_blockwise_1x128(e4m3(out.q, {n, rows}), f32(out.scales, {n, groups}),
                                      f32(out.deq, {n, rows}));
  return out;
}

TEST(RefFp8ColwiseQuant, EachExpertIsItsTransposeQuantisedRowwise) {
  const std::vector<int> counts = {0, 1, 127, 128, 129, 300, 0, 64, 257};
  const std::vector<int32_t> off = offsets_of(counts, 3);
  const Operand op(off, off.back() + 20, 40);
  int group = 0;
  for (size_t e = 0; e < counts.size(); ++e) {
    const int m = counts[e], groups = (m + 127) / 128;
    if (m == 0) continue;
    const ExpertRowwise want = rowwise_of_transpose(op, off[e], m);
    for (int64_t j = 0; j < op.n; ++j) {
      for (int g = 0; g < groups; ++g)
        ASSERT_EQ(op.scales[(group + g) * op.n + j], want.scales[j * groups + g])
            << "expert " << e << " column " << j << " group " << g;
      for (int c = 0; c < groups * 128; ++c) {
        const uint8_t got = op.xt[j * op.groups * 128 + group * 128 + c];
        ASSERT_EQ(got, c < m ? want.q[j * m + c] : 0)
            << "expert " << e << " column " << j << " row " << c << (c < m ? "" : " (padding)");
      }
    }
    group += groups;
  }
  EXPECT_EQ(op.scales[1], 1.0f) << "an all-zero group's scale";
}

struct WgradCase {
  std::vector<int> counts;
  int row_base = 0, spare_rows = 0;
  int64_t n_a = 24, n_b = 40;
  bool accumulate = false;
};

void check_wgrad(const WgradCase& c) {
  const std::vector<int32_t> off = offsets_of(c.counts, c.row_base);
  const int64_t experts = c.counts.size(), m_cap = off.back() + c.spare_rows;
  Operand a(off, m_cap, c.n_a), b(off, m_cap, c.n_b);
  std::vector<float> d = test::random_normal(experts * c.n_a * c.n_b);
  const std::vector<float> old = d;
  auto o = const_cast<int32_t*>(off.data());
  const int64_t g = a.groups;
  ref::grouped_gemm_fp8_wgrad(
      {.at = e4m3(a.xt, {c.n_a, g * 128}),
       .a_scales = f32(a.scales, {g, c.n_a}),
       .bt = e4m3(b.xt, {c.n_b, g * 128}),
       .b_scales = f32(b.scales, {g, c.n_b}),
       .offsets = TensorView::contiguous(o, DType::kInt32, {experts + 1}),
       .d = f32(d, {experts, c.n_a, c.n_b}),
       .accumulate = c.accumulate});
  for (int64_t e = 0; e < experts; ++e) {
    const int m = c.counts[e];
    const float* got = d.data() + e * c.n_a * c.n_b;
    std::vector<double> want(c.n_a * c.n_b, 0.0);
    if (c.accumulate) std::copy(old.begin() + e * c.n_a * c.n_b,
                                old.begin() + (e + 1) * c.n_a * c.n_b, want.begin());
    if (m > 0) {
      const ExpertRowwise da = rowwise_of_transpose(a, off[e], m);
      const ExpertRowwise db = rowwise_of_transpose(b, off[e], m);
      // want [n_a, n_b] += deq(a)ᵀ-rows [n_a, m] · deq(b) [m, n_b]
      ref::matmul(c.n_a, c.n_b, m, ref::rows_of(da.deq.data(), m),
                  ref::rows_of(db.deq.data(), m).transposed(), want.data(), c.accumulate);
    }
    const std::vector<float> got_v(got, got + c.n_a * c.n_b);
    EXPECT_LE(test::rel_norm_error(got_v, want), 1e-6) << "expert " << e << " (" << m << " rows)";
  }
}

TEST(RefFp8Wgrad, MatchesDequantisedProductWithEmptyExperts) {
  check_wgrad({.counts = {0, 1, 127, 129, 300, 0, 64, 257}, .row_base = 3, .spare_rows = 9});
}

TEST(RefFp8Wgrad, AccumulateAddsAndLeavesEmptyExpertsUntouched) {
  check_wgrad({.counts = {5, 0, 200, 0}, .spare_rows = 4, .n_a = 16, .n_b = 8,
               .accumulate = true});
}

// bf16 d: the fp32 result rounded once (empty experts +0).
TEST(RefFp8Wgrad, Bf16OutputIsTheFp32OneRounded) {
  const std::vector<int32_t> off = offsets_of({0, 130, 7}, 2);
  Operand a(off, off.back(), 16), b(off, off.back(), 24);
  auto o = const_cast<int32_t*>(off.data());
  std::vector<float> d32(3 * 16 * 24);
  std::vector<uint16_t> d16(d32.size(), 0xFFFF);
  for (bool bf16 : {false, true})
    ref::grouped_gemm_fp8_wgrad(
        {.at = e4m3(a.xt, {16, a.groups * 128}),
         .a_scales = f32(a.scales, {a.groups, 16}),
         .bt = e4m3(b.xt, {24, b.groups * 128}),
         .b_scales = f32(b.scales, {b.groups, 24}),
         .offsets = TensorView::contiguous(o, DType::kInt32, {4}),
         .d = bf16 ? TensorView::contiguous(d16.data(), DType::kBFloat16, {3, 16, 24})
                   : f32(d32, {3, 16, 24})});
  for (size_t i = 0; i < d32.size(); ++i)
    ASSERT_EQ(d16[i], ref::bf16_bits(d32[i])) << "element " << i;
}

TEST(RefFp8Wgrad, CloseToTheUnquantisedProduct) {
  // The FP8 error of one product is a few percent: a sanity check that the reference computes
  // dW = Σ a[r]ᵀ b[r] and not some other product of the same operands.
  const std::vector<int32_t> off = offsets_of({300}, 0);
  Operand a(off, 300, 16), b(off, 300, 24);
  std::vector<float> d(16 * 24);
  auto o = const_cast<int32_t*>(off.data());
  ref::grouped_gemm_fp8_wgrad({.at = e4m3(a.xt, {16, a.groups * 128}),
                               .a_scales = f32(a.scales, {a.groups, 16}),
                               .bt = e4m3(b.xt, {24, b.groups * 128}),
                               .b_scales = f32(b.scales, {b.groups, 24}),
                               .offsets = TensorView::contiguous(o, DType::kInt32, {2}),
                               .d = f32(d, {1, 16, 24})});
  std::vector<double> want(16 * 24, 0.0);
  ref::matmul(16, 24, 300, ref::rows_of(a.x.data(), 16).transposed(), ref::rows_of(b.x.data(), 24),
              want.data(), false);
  EXPECT_LE(test::rel_norm_error(d, want), 0.08);
}

// ---- validation ---------------------------------------------------------------------------

struct WgradViews {
  std::vector<uint8_t> at = std::vector<uint8_t>(16 * 256), bt = std::vector<uint8_t>(8 * 256);
  std::vector<float> sa = std::vector<float>(2 * 16), sb = std::vector<float>(2 * 8),
                     d = std::vector<float>(2 * 16 * 8);
  std::vector<int32_t> off = {0, 100, 130};
  GroupedGemmFp8WgradArgs args() {
    return {.at = e4m3(at, {16, 256}),
            .a_scales = f32(sa, {2, 16}),
            .bt = e4m3(bt, {8, 256}),
            .b_scales = f32(sb, {2, 8}),
            .offsets = i32(off, {3}),
            .d = f32(d, {2, 16, 8})};
  }
};

TEST(Fp8WgradValidation, NamesTheBadArgument) {
  WgradViews v;
  auto check = [&](auto mutate, const std::string& name) {
    GroupedGemmFp8WgradArgs a = v.args();
    mutate(a);
    expect_invalid([&] { validate_grouped_gemm_fp8_wgrad(a, Device::kCpu); }, name);
  };
  EXPECT_NO_THROW(validate_grouped_gemm_fp8_wgrad(v.args(), Device::kCpu));
  check([&](auto& a) { a.at = e4m3(v.at, {16, 200}); }, "at");             // not 128 G columns
  check([&](auto& a) { a.at = e4m3(v.at, {12, 256}); }, "at");             // N_a % 8
  check([&](auto& a) { a.at = f32(v.sa, {2, 16}); }, "at");                // dtype
  check([&](auto& a) { a.bt = e4m3(v.bt, {4, 512}); }, "bt");              // other G
  check([&](auto& a) { a.a_scales = f32(v.sa, {16, 2}); }, "a_scales");    // [N, G]
  check([&](auto& a) { a.b_scales = f32(v.sb, {1, 8}); }, "b_scales");
  check([&](auto& a) { a.offsets = i32(v.off, {1}); }, "offsets");         // E = 0
  check([&](auto& a) { a.offsets = f32(v.sa, {3}); }, "offsets");          // dtype
  check([&](auto& a) { a.d = f32(v.d, {2, 8, 16}); }, "d");
  check([&](auto& a) { a.d.dtype = DType::kFloat16; }, "d");
  check([&](auto& a) {  // bf16 d is fine, but not accumulated into
    a.d.dtype = DType::kBFloat16;
    a.accumulate = true;
  }, "accumulate");
  check([&](auto& a) { a.d = f32(v.sa, {2, 16, 8}); }, "d");  // d over a_scales
  check([&](auto& a) {
    a.d = TensorView::contiguous(v.bt.data() + 16, DType::kFloat32, {2, 16, 8});
  }, "d");  // d over bt
  // The GPU entry point validates before any CUDA call.
  expect_invalid([&] { grouped_gemm_fp8_wgrad(v.args(), nullptr); }, "at");
  // The reference checks the offsets' values: decreasing, and more groups than the capacity.
  v.off = {0, 100, 90};
  expect_invalid([&] { ref::grouped_gemm_fp8_wgrad(v.args()); }, "offsets");
  v.off = {0, 129, 258};  // 2 + 2 groups > 2
  expect_invalid([&] { ref::grouped_gemm_fp8_wgrad(v.args()); }, "offsets");
}

// The row+column form: the column-wise checks, then its row-wise copy's shape and the four
// outputs' disjointness.
TEST(Fp8RowcolQuantValidation, NamesTheBadArgument) {
  std::vector<float> x(100 * 256), sc(1 * 256), rs(2 * 100);  // rows scales [2, 100]
  std::vector<uint8_t> xt(256 * 128), q(100 * 256);
  std::vector<int32_t> off = {0, 100};
  auto run = [&](TensorView xtv, TensorView qv, TensorView rsv) {
    validate_quantize_fp8_rowcol_grouped(f32(x, {100, 256}), i32(off, {2}), xtv,
                                         f32(sc, {1, 256}), qv, rsv, Device::kCpu,
                                         DType::kFloat32);
  };
  EXPECT_NO_THROW(run(e4m3(xt, {256, 128}), e4m3(q, {100, 256}), f32(rs, {2, 100})));
  expect_invalid([&] { run(e4m3(xt, {256, 64}), e4m3(q, {100, 256}), f32(rs, {2, 100})); },
                 "xt");  // the column-wise checks come first
  expect_invalid([&] { run(e4m3(xt, {256, 128}), e4m3(q, {99, 256}), f32(rs, {2, 100})); },
                 "q_rows");
  expect_invalid([&] { run(e4m3(xt, {256, 128}), f32(x, {100, 256}), f32(rs, {2, 100})); },
                 "q_rows");  // dtype
  // Scale columns: fp8_scale_rows(100) = 100 (a multiple of 4); groups: ceil(256 / 128) = 2.
  expect_invalid([&] { run(e4m3(xt, {256, 128}), e4m3(q, {100, 256}), f32(rs, {1, 100})); },
                 "q_rows_scales");
  expect_invalid([&] { run(e4m3(xt, {256, 128}), e4m3(q, {100, 256}), f32(x, {2, 100})); },
                 "q_rows_scales");  // over x
  expect_invalid([&] {
    run(e4m3(xt, {256, 128}), TensorView::contiguous(xt.data() + 128, DType::kFloat8E4M3,
                                                     {100, 256}),
        f32(rs, {2, 100}));
  }, "xt");  // q_rows over xt
  // The GPU entry point takes bf16 x and validates before any CUDA call.
  expect_invalid([&] {
    quantize_fp8_rowcol_grouped(f32(x, {100, 256}), i32(off, {2}), e4m3(xt, {256, 128}),
                                f32(sc, {1, 256}), e4m3(q, {100, 256}), f32(rs, {2, 100}),
                                nullptr);
  }, "x");
}

TEST(Fp8ColwiseQuantValidation, NamesTheBadArgument) {
  std::vector<float> x(100 * 16), sc(1 * 16);  // E = 1: G = (100 + 127) / 128 = 1
  std::vector<uint8_t> xt(16 * 128);
  std::vector<int32_t> off = {0, 100};
  auto run = [&](TensorView xv, TensorView ov, TensorView xtv, TensorView sv) {
    ref::quantize_fp8_colwise_grouped(xv, ov, xtv, sv);
  };
  EXPECT_NO_THROW(run(f32(x, {100, 16}), i32(off, {2}), e4m3(xt, {16, 128}), f32(sc, {1, 16})));
  expect_invalid([&] { run(f32(x, {100, 12}), i32(off, {2}), e4m3(xt, {12, 128}), f32(sc, {1, 12})); },
                 "x");  // N % 8
  expect_invalid([&] { run(f32(x, {1600}), i32(off, {2}), e4m3(xt, {16, 128}), f32(sc, {1, 16})); },
                 "x");  // rank
  expect_invalid([&] { run(f32(x, {100, 16}), i32(off, {1}), e4m3(xt, {16, 128}), f32(sc, {1, 16})); },
                 "offsets");
  expect_invalid([&] { run(f32(x, {100, 16}), i32(off, {2}), e4m3(xt, {16, 100}), f32(sc, {1, 16})); },
                 "xt");
  expect_invalid([&] { run(f32(x, {100, 16}), i32(off, {2}), e4m3(xt, {16, 128}), f32(sc, {16, 1})); },
                 "scales");
  // Outputs over the input or each other.
  expect_invalid(
      [&] { run(f32(x, {100, 16}), i32(off, {2}), e4m3(xt, {16, 128}), f32(x, {1, 16})); },
      "scales");
  expect_invalid([&] {
    run(f32(x, {100, 16}), i32(off, {2}), e4m3(xt, {16, 128}),
        TensorView::contiguous(xt.data() + 64, DType::kFloat32, {1, 16}));
  }, "xt");
  off = {0, 101};  // past M_cap
  expect_invalid([&] { run(f32(x, {100, 16}), i32(off, {2}), e4m3(xt, {16, 128}), f32(sc, {1, 16})); },
                 "offsets");
  // The GPU entry point takes bf16 x and validates before any CUDA call.
  off = {0, 100};
  expect_invalid([&] {
    quantize_fp8_colwise_grouped(f32(x, {100, 16}), i32(off, {2}), e4m3(xt, {16, 128}),
                                 f32(sc, {1, 16}), nullptr);
  }, "x");
  // The gather form: M_cap is gather_index's length, x any number of token rows.
  std::vector<int32_t> index(100, 0);
  auto gather = [&](TensorView xv, TensorView iv, TensorView xtv) {
    validate_quantize_fp8_colwise_grouped(xv, i32(off, {2}), xtv, f32(sc, {1, 16}), Device::kCpu,
                                          DType::kFloat32, &iv);
  };
  EXPECT_NO_THROW(gather(f32(x, {7, 16}), i32(index, {100}), e4m3(xt, {16, 128})));
  expect_invalid([&] { gather(f32(x, {7, 16}), i32(index, {10, 10}), e4m3(xt, {16, 128})); },
                 "gather_index");  // rank
  expect_invalid([&] { gather(f32(x, {7, 16}), f32(x, {100}), e4m3(xt, {16, 128})); },
                 "gather_index");  // dtype
  expect_invalid([&] { gather(f32(x, {7, 16}), i32(index, {100}), e4m3(xt, {16, 64})); },
                 "xt");  // the groups of M_cap = 100 need 128 columns
  expect_invalid([&] { gather(f32(x, {7, 16}), TensorView{}, e4m3(xt, {16, 128})); },
                 "gather_index");  // the default view: rank 0
}

}  // namespace
}  // namespace moefuse
