// grouped_gemm_dgrad with its side permute (GroupedGemmDgradArgs::permute): xs bit for bit the
// CPU reference's permute (rows without a token zeroed), d bit for bit the plain dgrad's, the
// health flag as permute sets it. Cases: qwen3's k and H on a few hundred tokens, gpt-oss's H
// (2880: the 192-wide store shape), padded maps (align 8: zero rows inside the experts), one
// token, no tokens (only zero rows, no tile), every token on one expert, a grid of one and of
// three CTAs (many tiles a CTA, so the pieces and the leftover run), H of 520 (a partial last
// piece of vectors).
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "common/test_util.h"
#include "gpu/dispatch_test_util.h"
#include "moefuse/dispatch.h"
#include "moefuse/grouped_gemm_backward.h"
#include "moefuse/health.h"
#include "ref/dispatch.h"

namespace moefuse {
namespace {

using test::Bf16;
using test::DeviceBuffer;

struct Case {
  int64_t T, H, E, k, align, fc1;
  int max_ctas = 0;
  std::string name() const {
    return "T=" + std::to_string(T) + " H=" + std::to_string(H) + " E=" + std::to_string(E) +
           " k=" + std::to_string(k) + " align=" + std::to_string(align) +
           " fc1=" + std::to_string(fc1) + " max_ctas=" + std::to_string(max_ctas);
  }
};

std::vector<uint16_t> bits(const std::vector<Bf16>& v) {
  std::vector<uint16_t> b(v.size());
  std::memcpy(b.data(), v.data(), v.size() * 2);
  return b;
}

// Runs the dgrad with and without the permute; `bad_row` (>= 0) corrupts that row_of entry.
void run_case(const Case& c, int64_t bad_row = -1) {
  SCOPED_TRACE(c.name() + (bad_row >= 0 ? " bad row_of entry" : "") +
               " seed=" + std::to_string(test::seed()));
  test::RefMaps m = test::make_ref_maps(c.T, c.E, c.k, c.align);
  const int64_t T = c.T, H = c.H, k = c.k, R = m.R, E = c.E, K = c.fc1;
  const int32_t lost_row = bad_row >= 0 ? m.row_of[bad_row] : -1;  // no longer written
  if (bad_row >= 0) m.row_of[bad_row] = static_cast<int32_t>(R + 5);
  std::vector<float> x = test::bf16_rounded(test::random_normal(T * H)), xs(R * H);
  ref::permute(test::host_view(x, DType::kFloat32, {T, H}),
               test::host_view(m.token_of_row, DType::kInt32, {R}),
               test::host_view(xs, DType::kFloat32, {R, H}));
  DeviceBuffer<Bf16> g_x(test::to_bf16(x)), g_xs(R * H), g_d(R * H), g_d_plain(R * H),
      g_a(test::to_bf16(test::random_normal(R * K))),
      g_b(test::to_bf16(test::random_normal(E * K * H)));
  DeviceBuffer<int32_t> g_row_of(m.row_of), g_tor(m.token_of_row), g_off(m.offsets), health(1);
  g_xs.poison(), g_d.poison(), g_d_plain.poison();
  const auto hv = health.view(DType::kInt32, {1});
  reset_health_flags(hv, nullptr);
  const GroupedGemmDgradArgs plain{.a = g_a.view(DType::kBFloat16, {R, K}),
                                   .b = g_b.view(DType::kBFloat16, {E, K, H}),
                                   .offsets = g_off.view(DType::kInt32, {E + 1}),
                                   .d = g_d_plain.view(DType::kBFloat16, {R, H}),
                                   .max_ctas = c.max_ctas,
                                   .permute = {}};
  grouped_gemm_dgrad(plain, nullptr);
  GroupedGemmDgradArgs fused = plain;
  fused.d = g_d.view(DType::kBFloat16, {R, H});
  fused.permute = {.x = g_x.view(DType::kBFloat16, {T, H}),
                   .row_of = g_row_of.view(DType::kInt32, {T, k}),
                   .token_of_row = g_tor.view(DType::kInt32, {R}),
                   .xs = g_xs.view(DType::kBFloat16, {R, H}),
                   .health = hv};
  grouped_gemm_dgrad(fused, nullptr);
  MOEFUSE_CUDA_CHECK(cudaDeviceSynchronize());
  if (bad_row >= 0) {  // the row the bad entry replaced keeps its poison, as with permute
    const std::vector<float> got = test::from_bf16(g_xs.download());
    const std::vector<uint16_t> got_bits = bits(g_xs.download());
    for (int64_t h = 0; h < H; ++h) {
      ASSERT_EQ(got_bits[lost_row * H + h], 0xFFFF) << "xs row " << lost_row << " was written";
      xs[lost_row * H + h] = got[lost_row * H + h];
    }
    EXPECT_EQ(read_health_flags(hv, nullptr), kHealthRowOutOfRange);
  } else {
    EXPECT_EQ(read_health_flags(hv, nullptr), 0);
  }
  EXPECT_TRUE(test::same_bits(test::from_bf16(g_xs.download()), xs, "xs"));
  EXPECT_TRUE(test::same_bits(bits(g_d.download()), bits(g_d_plain.download()), "d"));
}

TEST(DgradPermute, MatchesPermuteAndLeavesTheGemmAlone) {
  MOEFUSE_REQUIRE_HOPPER();
  const Case cases[] = {{300, 2048, 128, 8, 1, 1536},
                        {257, 2880, 16, 4, 8, 128},
                        {1, 64, 4, 1, 1, 64},
                        {0, 256, 8, 2, 8, 64},
                        {513, 256, 1, 1, 1, 192},
                        {700, 520, 8, 2, 1, 64, 3},
                        {700, 2048, 32, 8, 8, 256, 1},
                        {2048, 7168, 32, 4, 1, 128}};
  for (const Case& c : cases) run_case(c);
}

TEST(DgradPermute, BadRowOfEntrySetsTheHealthFlagAsPermuteDoes) {
  MOEFUSE_REQUIRE_HOPPER();
  run_case({100, 256, 8, 2, 1, 64}, /*bad_row=*/37);
}

}  // namespace
}  // namespace moefuse
