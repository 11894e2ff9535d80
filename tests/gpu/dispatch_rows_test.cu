// GPU permute, combine and their backward (also with an added term) vs the CPU reference: H
// 8..7168 (with a partial last chunk), k 1..16, T 0..16384 (T = 4096 gives blocks of the
// persistent permute several token groups, so its shared-memory stages and mbarrier parities are
// reused), padded maps (align 8);
// permute bitwise, the sums within bf16 rounding; bitwise repeatability.
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <string>
#include <vector>

#include "common/test_util.h"
#include "gpu/dispatch_test_util.h"
#include "moefuse/dispatch.h"
#include "moefuse/health.h"
#include "ref/dispatch.h"

namespace moefuse {
namespace {

using test::Bf16;
using test::DeviceBuffer;

constexpr double kBf16Tolerance = 8e-3;

struct Case {
  int64_t T, H, E, k, align;
  std::string name() const {
    return "T=" + std::to_string(T) + " H=" + std::to_string(H) + " E=" + std::to_string(E) +
           " k=" + std::to_string(k) + " align=" + std::to_string(align);
  }
};

const Case kCases[] = {{37, 2048, 64, 8, 1},  {1024, 2880, 128, 4, 8}, {300, 7168, 32, 4, 1},
                       {1, 8, 1, 1, 1},       {5, 24, 16, 16, 8},      {0, 2048, 8, 2, 1},
                       {1024, 4096, 8, 2, 1}, {64, 520, 512, 16, 8},
                       {4096, 2880, 128, 4, 8}, {16384, 64, 16, 2, 1},
                       // ~396 blocks of 2-token groups for 2048 groups: each block walks ~5
                       // groups, reusing both stages and both mbarrier parities.
                       {4096, 7168, 32, 2, 1},
                       // Rows of split 256-byte units, four a stage: ~528 blocks walk 3072
                       // groups, ~6 each.
                       {12288, 2880, 64, 4, 1},
                       // Rows too wide for the permute's two-row stages: one row a stage.
                       {40, 30000, 8, 2, 1}};

TEST(DispatchRows, PermuteAndPermuteBackwardMatchReference) {
  MOEFUSE_REQUIRE_HOPPER();
  for (const Case& c : kCases) {
    SCOPED_TRACE(c.name() + " seed=" + std::to_string(test::seed()));
    test::RefMaps m = test::make_ref_maps(c.T, c.E, c.k, c.align);
    const int64_t T = c.T, H = c.H, k = c.k, R = m.R;
    std::vector<float> x = test::bf16_rounded(test::random_normal(T * H)), xs(R * H);
    ref::permute(test::host_view(x, DType::kFloat32, {T, H}),
                 test::host_view(m.token_of_row, DType::kInt32, {R}),
                 test::host_view(xs, DType::kFloat32, {R, H}));
    DeviceBuffer<Bf16> g_x(test::to_bf16(x)), g_xs(R * H);
    DeviceBuffer<int32_t> g_row_of(m.row_of), g_tor(m.token_of_row), health(1);
    g_xs.poison();
    const auto hv = health.view(DType::kInt32, {1});
    reset_health_flags(hv, nullptr);
    permute(g_x.view(DType::kBFloat16, {T, H}), g_row_of.view(DType::kInt32, {T, k}),
            g_tor.view(DType::kInt32, {R}), g_xs.view(DType::kBFloat16, {R, H}), hv, nullptr);
    EXPECT_TRUE(test::same_bits(test::from_bf16(g_xs.download()), xs, "xs"));

    std::vector<float> dxs = test::bf16_rounded(test::random_normal(R * H)), dx(T * H);
    // The reference reads every row_of entry; padding rows of dxs are never read.
    ref::permute_backward(test::host_view(dxs, DType::kFloat32, {R, H}),
                          test::host_view(m.row_of, DType::kInt32, {T, k}),
                          test::host_view(dx, DType::kFloat32, {T, H}));
    DeviceBuffer<Bf16> g_dxs(test::to_bf16(dxs)), g_dx(T * H);
    g_dx.poison();
    permute_backward(g_dxs.view(DType::kBFloat16, {R, H}), g_row_of.view(DType::kInt32, {T, k}),
                     g_dx.view(DType::kBFloat16, {T, H}), hv, nullptr);
    EXPECT_LE(test::rel_norm_error(test::from_bf16(g_dx.download()), dx), kBf16Tolerance);
    EXPECT_EQ(read_health_flags(hv, nullptr), 0);
  }
}

TEST(DispatchRows, CombineAndBackwardMatchReference) {
  MOEFUSE_REQUIRE_HOPPER();
  for (const Case& c : kCases) {
    SCOPED_TRACE(c.name() + " seed=" + std::to_string(test::seed()));
    test::RefMaps m = test::make_ref_maps(c.T, c.E, c.k, c.align);
    const int64_t T = c.T, H = c.H, k = c.k, R = m.R;
    std::vector<float> ys = test::bf16_rounded(test::random_normal(R * H)),
                       probs = test::random_uniform(T * k, 0.0f, 1.0f), y(T * H);
    ref::combine(test::host_view(ys, DType::kFloat32, {R, H}),
                 test::host_view(probs, DType::kFloat32, {T, k}),
                 test::host_view(m.row_of, DType::kInt32, {T, k}),
                 test::host_view(y, DType::kFloat32, {T, H}));
    DeviceBuffer<Bf16> g_ys(test::to_bf16(ys)), g_y(T * H);
    DeviceBuffer<float> g_probs(probs);
    DeviceBuffer<int32_t> g_row_of(m.row_of), g_tor(m.token_of_row), health(1);
    const auto hv = health.view(DType::kInt32, {1});
    reset_health_flags(hv, nullptr);
    auto run_combine = [&] {
      g_y.poison();
      combine(g_ys.view(DType::kBFloat16, {R, H}), g_probs.view(DType::kFloat32, {T, k}),
              g_row_of.view(DType::kInt32, {T, k}), g_y.view(DType::kBFloat16, {T, H}), hv,
              nullptr);
      return test::from_bf16(g_y.download());
    };
    const auto y_gpu = run_combine();
    EXPECT_LE(test::rel_norm_error(y_gpu, y), kBf16Tolerance);
    EXPECT_TRUE(test::same_bits(run_combine(), y_gpu, "y (second run)"));

    std::vector<float> dy = test::bf16_rounded(test::random_normal(T * H)), dys(R * H),
                       d_probs(T * k);
    ref::combine_backward(test::host_view(dy, DType::kFloat32, {T, H}),
                          test::host_view(ys, DType::kFloat32, {R, H}),
                          test::host_view(probs, DType::kFloat32, {T, k}),
                          test::host_view(m.row_of, DType::kInt32, {T, k}),
                          test::host_view(dys, DType::kFloat32, {R, H}),
                          test::host_view(d_probs, DType::kFloat32, {T, k}));
    DeviceBuffer<Bf16> g_dy(test::to_bf16(dy)), g_dys(R * H);
    DeviceBuffer<float> g_dp(T * k);
    auto run_backward = [&] {
      g_dys.poison(), g_dp.poison();
      combine_backward(g_dy.view(DType::kBFloat16, {T, H}), g_ys.view(DType::kBFloat16, {R, H}),
                       g_probs.view(DType::kFloat32, {T, k}), g_row_of.view(DType::kInt32, {T, k}),
                       g_tor.view(DType::kInt32, {R}), g_dys.view(DType::kBFloat16, {R, H}),
                       g_dp.view(DType::kFloat32, {T, k}), hv, nullptr);
      return std::pair{test::from_bf16(g_dys.download()), g_dp.download()};
    };
    const auto [dys_gpu, dp_gpu] = run_backward();
    EXPECT_LE(test::rel_norm_error(dys_gpu, dys), kBf16Tolerance);
    EXPECT_LE(test::rel_norm_error(dp_gpu, d_probs), 1e-5);
    const auto [dys_again, dp_again] = run_backward();
    EXPECT_TRUE(test::same_bits(dys_again, dys_gpu, "dys (second run)"));
    EXPECT_TRUE(test::same_bits(dp_again, dp_gpu, "d_probs (second run)"));

    // The unweighted forms (weights applied by the FC2 epilogue): probs = 1 in the reference.
    std::vector<float> ones(T * k, 1.0f), dys1(R * H), dp1(T * k);
    ref::combine_backward(test::host_view(dy, DType::kFloat32, {T, H}),
                          test::host_view(ys, DType::kFloat32, {R, H}),
                          test::host_view(ones, DType::kFloat32, {T, k}),
                          test::host_view(m.row_of, DType::kInt32, {T, k}),
                          test::host_view(dys1, DType::kFloat32, {R, H}),
                          test::host_view(dp1, DType::kFloat32, {T, k}));
    g_dys.poison();
    combine_backward(g_dy.view(DType::kBFloat16, {T, H}), TensorView{}, TensorView{},
                     g_row_of.view(DType::kInt32, {T, k}), g_tor.view(DType::kInt32, {R}),
                     g_dys.view(DType::kBFloat16, {R, H}), TensorView{}, hv, nullptr);
    EXPECT_TRUE(test::same_bits(test::from_bf16(g_dys.download()), dys1, "dys (unweighted)"));
    EXPECT_EQ(read_health_flags(hv, nullptr), 0);
  }
}

// combine_add and permute_backward_add: the sum plus the added term, rounded once, against the
// reference's sum plus the term; in place (add is the output) bit for bit as apart.
TEST(DispatchRows, AddedTermMatchesReferenceInPlaceOrApart) {
  MOEFUSE_REQUIRE_HOPPER();
  for (const Case& c : {kCases[0], kCases[1], kCases[3], kCases[5], kCases[8]}) {
    SCOPED_TRACE(c.name() + " seed=" + std::to_string(test::seed()));
    test::RefMaps m = test::make_ref_maps(c.T, c.E, c.k, c.align);
    const int64_t T = c.T, H = c.H, k = c.k, R = m.R;
    std::vector<float> rows = test::bf16_rounded(test::random_normal(R * H)),
                       probs = test::random_uniform(T * k, 0.0f, 1.0f),
                       add = test::bf16_rounded(test::random_normal(T * H));
    DeviceBuffer<Bf16> g_rows(test::to_bf16(rows)), g_add(test::to_bf16(add)), g_out(T * H);
    DeviceBuffer<float> g_probs(probs);
    DeviceBuffer<int32_t> g_row_of(m.row_of), health(1);
    const auto hv = health.view(DType::kInt32, {1});
    const auto rows_v = g_rows.view(DType::kBFloat16, {R, H}),
               add_v = g_add.view(DType::kBFloat16, {T, H}),
               out_v = g_out.view(DType::kBFloat16, {T, H}),
               row_of_v = g_row_of.view(DType::kInt32, {T, k});
    reset_health_flags(hv, nullptr);
    for (bool weighted : {true, false}) {
      SCOPED_TRACE(weighted ? "combine_add" : "permute_backward_add");
      std::vector<float> want(T * H);
      const auto want_v = test::host_view(want, DType::kFloat32, {T, H});
      if (weighted)
        ref::combine(test::host_view(rows, DType::kFloat32, {R, H}),
                     test::host_view(probs, DType::kFloat32, {T, k}),
                     test::host_view(m.row_of, DType::kInt32, {T, k}), want_v);
      else
        ref::permute_backward(test::host_view(rows, DType::kFloat32, {R, H}),
                              test::host_view(m.row_of, DType::kInt32, {T, k}), want_v);
      for (int64_t i = 0; i < T * H; ++i) want[i] += add[i];
      // Apart: into a poisoned output. In place: the output holds the term.
      auto run = [&](const TensorView& term) {
        if (weighted)
          combine_add(rows_v, g_probs.view(DType::kFloat32, {T, k}), row_of_v, term, out_v, hv,
                      nullptr);
        else
          permute_backward_add(rows_v, row_of_v, term, out_v, hv, nullptr);
        return test::from_bf16(g_out.download());
      };
      g_out.poison();
      const std::vector<float> apart = run(add_v);
      EXPECT_LE(test::rel_norm_error(apart, want), kBf16Tolerance);
      g_out.upload(test::to_bf16(add));
      EXPECT_TRUE(test::same_bits(run(out_v), apart, "in place against apart"));
    }
    EXPECT_EQ(read_health_flags(hv, nullptr), 0);
  }
}

// permute_backward_router: the sum, the added term (none, apart, in place) and the router's
// bf16(d_logits) · w_router, rounded once, against the fp64 reference of the same bf16 operands.
// E from 1 to 512 (one to eight K pieces, some partial), H with a partial last column chunk, T
// with a partial last token tile.
TEST(DispatchRows, RouterTermMatchesReference) {
  MOEFUSE_REQUIRE_HOPPER();
  for (const Case& c : {kCases[0], kCases[1], kCases[2], kCases[3], kCases[5], kCases[7],
                        Case{33, 136, 7, 3, 1}, Case{100, 264, 130, 2, 8}}) {
    SCOPED_TRACE(c.name() + " seed=" + std::to_string(test::seed()));
    test::RefMaps m = test::make_ref_maps(c.T, c.E, c.k, c.align);
    const int64_t T = c.T, H = c.H, E = c.E, k = c.k, R = m.R;
    std::vector<float> rows = test::bf16_rounded(test::random_normal(R * H)),
                       add = test::bf16_rounded(test::random_normal(T * H)),
                       d_logits = test::random_normal(T * E),
                       w_router = test::bf16_rounded(test::random_normal(E * H, 0.2f));
    std::vector<float> sum(T * H);
    ref::permute_backward(test::host_view(rows, DType::kFloat32, {R, H}),
                          test::host_view(m.row_of, DType::kInt32, {T, k}),
                          test::host_view(sum, DType::kFloat32, {T, H}));
    const std::vector<float> dl16 = test::bf16_rounded(d_logits);
    for (int64_t t = 0; t < T; ++t) {
      for (int64_t h = 0; h < H; ++h) {
        double term = 0;
        for (int64_t e = 0; e < E; ++e) term += double{dl16[t * E + e]} * w_router[e * H + h];
        sum[t * H + h] += static_cast<float>(term);
      }
    }
    DeviceBuffer<Bf16> g_rows(test::to_bf16(rows)), g_add(test::to_bf16(add)),
        g_w(test::to_bf16(w_router)), g_out(T * H);
    DeviceBuffer<float> g_dl(d_logits);
    DeviceBuffer<int32_t> g_row_of(m.row_of), health(1);
    const auto hv = health.view(DType::kInt32, {1});
    const auto out_v = g_out.view(DType::kBFloat16, {T, H});
    reset_health_flags(hv, nullptr);
    auto run = [&](const TensorView& term) {
      permute_backward_router(g_rows.view(DType::kBFloat16, {R, H}),
                              g_row_of.view(DType::kInt32, {T, k}), term,
                              g_dl.view(DType::kFloat32, {T, E}),
                              g_w.view(DType::kBFloat16, {E, H}), out_v, hv, nullptr);
      return test::from_bf16(g_out.download());
    };
    g_out.poison();
    EXPECT_LE(test::rel_norm_error(run(TensorView{}), sum), kBf16Tolerance) << "no added term";
    std::vector<float> want = sum;
    for (int64_t i = 0; i < T * H; ++i) want[i] += add[i];
    g_out.poison();
    const std::vector<float> apart = run(g_add.view(DType::kBFloat16, {T, H}));
    EXPECT_LE(test::rel_norm_error(apart, want), kBf16Tolerance) << "added term apart";
    g_out.upload(test::to_bf16(add));
    EXPECT_TRUE(test::same_bits(run(out_v), apart, "in place against apart"));
    EXPECT_TRUE(test::same_bits(run(g_add.view(DType::kBFloat16, {T, H})), apart, "repeat"));
    EXPECT_EQ(read_health_flags(hv, nullptr), 0);
  }
}

TEST(DispatchRows, BadRowSetsHealthFlag) {
  MOEFUSE_REQUIRE_HOPPER();
  const int64_t T = 4, H = 64, k = 2, R = 8;
  std::vector<int32_t> row_of = {0, 1, 2, 3, 4, 99, 6, 7};
  DeviceBuffer<Bf16> ys(test::to_bf16(test::random_normal(R * H))), y(T * H);
  DeviceBuffer<float> probs(test::random_uniform(T * k, 0, 1));
  DeviceBuffer<int32_t> g_row_of(row_of), health(1);
  const auto hv = health.view(DType::kInt32, {1});
  reset_health_flags(hv, nullptr);
  combine(ys.view(DType::kBFloat16, {R, H}), probs.view(DType::kFloat32, {T, k}),
          g_row_of.view(DType::kInt32, {T, k}), y.view(DType::kBFloat16, {T, H}), hv, nullptr);
  EXPECT_EQ(read_health_flags(hv, nullptr) & kHealthRowOutOfRange, kHealthRowOutOfRange);

  // A token_of_row entry outside [-1, T) is reported by the zeroing warps; a good map is not,
  // whatever R is (the warps' lanes past R read nothing).
  std::vector<int32_t> good_row_of = {0, 1, 2, 3, 4, 5, 6, 7}, tor = {0, 0, 1, 1, 2, 2, 3, 3};
  DeviceBuffer<int32_t> g_good(good_row_of);
  DeviceBuffer<Bf16> x(test::to_bf16(test::random_normal(T * H))), xs(R * H);
  for (int32_t entry : {2, static_cast<int32_t>(T), -2}) {  // 2 is row 5's true token
    SCOPED_TRACE("token_of_row[5] = " + std::to_string(entry));
    std::vector<int32_t> m = tor;
    m[5] = entry;
    DeviceBuffer<int32_t> g_tor(m);
    reset_health_flags(hv, nullptr);
    permute(x.view(DType::kBFloat16, {T, H}), g_good.view(DType::kInt32, {T, k}),
            g_tor.view(DType::kInt32, {R}), xs.view(DType::kBFloat16, {R, H}), hv, nullptr);
    EXPECT_EQ(read_health_flags(hv, nullptr), entry == 2 ? 0 : kHealthRowOutOfRange);
  }
}

}  // namespace
}  // namespace moefuse
