// The GLU weight interleave: the row map, and the host conversion of a [gate; up] weight.
#include <gtest/gtest.h>

#include <set>
#include <vector>

#include "common/test_util.h"
#include "moefuse/error.h"
#include "moefuse/grouped_gemm.h"

namespace moefuse {
namespace {

TEST(GemmInterleave, RowMapIsABijectionPairingGateAndUp) {
  for (int64_t ffn : {8, 16, 24, 768}) {
    std::set<int64_t> seen;
    for (int64_t r = 0; r < 2 * ffn; ++r) seen.insert(glu_interleaved_row(r, ffn));
    EXPECT_EQ(static_cast<int64_t>(seen.size()), 2 * ffn);
    EXPECT_EQ(*seen.begin(), 0);
    EXPECT_EQ(*seen.rbegin(), 2 * ffn - 1);
    for (int64_t j = 0; j < ffn; ++j) {
      // gate j and up j: same 16-block, 8 apart, same column pair slot.
      const int64_t g = glu_interleaved_row(j, ffn), u = glu_interleaved_row(ffn + j, ffn);
      ASSERT_EQ(u - g, kGluInterleave) << "F " << ffn << " j " << j;
      ASSERT_EQ(g / 16, j / 8);
      ASSERT_EQ(g % 8, j % 8);
    }
  }
}

TEST(GemmInterleave, HostConversionMovesWholeRows) {
  const int64_t experts = 3, ffn = 24, hidden = 5;
  std::vector<float> src = test::random_normal(experts * 2 * ffn * hidden);
  std::vector<float> dst(src.size(), -1.0f);
  interleave_glu_weight(
      TensorView::contiguous(src.data(), DType::kFloat32, {experts, 2 * ffn, hidden}),
      TensorView::contiguous(dst.data(), DType::kFloat32, {experts, 2 * ffn, hidden}));
  for (int64_t e = 0; e < experts; ++e)
    for (int64_t r = 0; r < 2 * ffn; ++r)
      for (int64_t h = 0; h < hidden; ++h)
        ASSERT_EQ(dst[(e * 2 * ffn + glu_interleaved_row(r, ffn)) * hidden + h],
                  src[(e * 2 * ffn + r) * hidden + h]);
  // A bias [E, 2F] goes the same way.
  std::vector<uint16_t> bsrc(experts * 2 * ffn), bdst(bsrc.size());
  for (size_t i = 0; i < bsrc.size(); ++i) bsrc[i] = static_cast<uint16_t>(i * 7 + 1);
  interleave_glu_weight(TensorView::contiguous(bsrc.data(), DType::kBFloat16, {experts, 2 * ffn}),
                        TensorView::contiguous(bdst.data(), DType::kBFloat16, {experts, 2 * ffn}));
  for (int64_t e = 0; e < experts; ++e)
    for (int64_t r = 0; r < 2 * ffn; ++r)
      ASSERT_EQ(bdst[e * 2 * ffn + glu_interleaved_row(r, ffn)], bsrc[e * 2 * ffn + r]);
}

TEST(GemmInterleave, RejectsBadShapesAndAliasing) {
  std::vector<float> buf(2 * 40 * 3);
  auto view = [&](float* p, std::initializer_list<int64_t> s) {
    return TensorView::contiguous(p, DType::kFloat32, s);
  };
  auto argument_of = [](auto&& fn) -> std::string {
    try {
      fn();
    } catch (const InvalidArgument& e) {
      return e.argument();
    }
    return "(accepted)";
  };
  std::vector<float> other(buf.size());
  EXPECT_EQ(argument_of([&] { interleave_glu_weight(view(buf.data(), {2, 40, 3}), view(other.data(), {2, 40, 3})); }), "src");  // 40 % 16
  EXPECT_EQ(argument_of([&] { interleave_glu_weight(view(buf.data(), {3, 32, 2}), view(buf.data(), {3, 32, 2})); }), "dst");  // aliasing
  EXPECT_EQ(argument_of([&] { interleave_glu_weight(view(buf.data(), {3, 32, 2}), view(other.data(), {3, 32, 1})); }), "dst");
  EXPECT_EQ(argument_of([&] { interleave_glu_weight(view(buf.data(), {240}), view(other.data(), {240})); }), "src");
}

}  // namespace
}  // namespace moefuse
