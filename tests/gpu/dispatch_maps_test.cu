// GPU offsets and dispatch maps vs the CPU reference (bitwise), for E 1..512, k 1..16,
// T 0..4096, align 1 and 16, all tokens to the same experts, and out-of-range indices.
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

using test::DeviceBuffer;

// k distinct random experts per token (or the same k for every token).
std::vector<int32_t> random_routes(int64_t T, int64_t E, int64_t k, bool same) {
  std::vector<int32_t> idx(T * k), perm(E);
  std::iota(perm.begin(), perm.end(), 0);
  for (int64_t t = 0; t < T; ++t) {
    if (!same || t == 0) std::shuffle(perm.begin(), perm.end(), test::rng());
    std::copy(perm.begin(), perm.begin() + k, idx.begin() + t * k);
  }
  return idx;
}

struct Maps {
  std::vector<int32_t> offsets, row_of, token_of_row;
};

Maps reference_maps(std::vector<int32_t> idx, int64_t T, int64_t E, int64_t k, int64_t align,
                    int64_t R) {
  std::vector<int32_t> counts(E, 0);
  for (int32_t e : idx) ++counts[e];
  Maps m{.offsets = std::vector<int32_t>(E + 1), .row_of = std::vector<int32_t>(T * k),
         .token_of_row = std::vector<int32_t>(R)};
  ref::expert_offsets(test::host_view(counts, DType::kInt32, {E}),
                      test::host_view(m.offsets, DType::kInt32, {E + 1}), align);
  ref::dispatch_maps(test::host_view(idx, DType::kInt32, {T, k}),
                     test::host_view(m.offsets, DType::kInt32, {E + 1}),
                     test::host_view(m.row_of, DType::kInt32, {T, k}),
                     test::host_view(m.token_of_row, DType::kInt32, {R}));
  return m;
}

Maps gpu_maps(const std::vector<int32_t>& idx, int64_t T, int64_t E, int64_t k, int64_t align,
              int64_t R, int32_t* health_bits = nullptr) {
  DeviceBuffer<int32_t> g_idx(idx), offsets(E + 1), row_of(T * k), tor(R), health(1);
  offsets.poison(0x7F), row_of.poison(0x7F), tor.poison(0x7F);
  DeviceBuffer<unsigned char> ws(dispatch_maps_workspace_size(T, E));
  ws.poison();
  const auto hv = health.view(DType::kInt32, {1});
  reset_health_flags(hv, nullptr);
  dispatch_maps(g_idx.view(DType::kInt32, {T, k}), E, align,
                DispatchMaps{.offsets = offsets.view(DType::kInt32, {E + 1}),
                             .row_of = row_of.view(DType::kInt32, {T, k}),
                             .token_of_row = tor.view(DType::kInt32, {R})},
                hv, Workspace{.data = ws.data(), .bytes = ws.size()}, nullptr);
  const int32_t bits = read_health_flags(hv, nullptr);
  if (health_bits) *health_bits = bits;
  return {.offsets = offsets.download(), .row_of = row_of.download(), .token_of_row = tor.download()};
}

TEST(DispatchMaps, MatchReferenceBitwise) {
  MOEFUSE_REQUIRE_HOPPER();
  for (int64_t E : {1, 7, 64, 128, 256, 512}) {
    for (int64_t k : {1, 2, 8, 16}) {
      if (k > E) continue;
      for (int64_t T : {0, 1, 37, 4096}) {
        for (int64_t align : {1, 16}) {
          for (bool same : {false, true}) {
            SCOPED_TRACE("E=" + std::to_string(E) + " k=" + std::to_string(k) + " T=" +
                         std::to_string(T) + " align=" + std::to_string(align) +
                         (same ? " same experts" : "") + " seed=" + std::to_string(test::seed()));
            const int64_t R = T * k + E * (align - 1) + 5;  // 5 spare rows past any offsets[E]
            const auto idx = random_routes(T, E, k, same);
            const Maps want = reference_maps(idx, T, E, k, align, R);
            int32_t bits = -1;
            const Maps got = gpu_maps(idx, T, E, k, align, R, &bits);
            EXPECT_EQ(bits, 0);
            ASSERT_TRUE(test::same_bits(got.offsets, want.offsets, "offsets"));
            ASSERT_TRUE(test::same_bits(got.row_of, want.row_of, "row_of"));
            ASSERT_TRUE(test::same_bits(got.token_of_row, want.token_of_row, "token_of_row"));
          }
        }
      }
    }
  }
}

TEST(DispatchMaps, LargeTokenCountAndRepeatability) {
  MOEFUSE_REQUIRE_HOPPER();
  const int64_t T = 65536 + 3, E = 128, k = 8, R = T * k;
  const auto idx = random_routes(T, E, k, false);
  const Maps want = reference_maps(idx, T, E, k, 1, R);
  const Maps a = gpu_maps(idx, T, E, k, 1, R), b = gpu_maps(idx, T, E, k, 1, R);
  EXPECT_TRUE(test::same_bits(a.row_of, want.row_of, "row_of"));
  EXPECT_TRUE(test::same_bits(a.token_of_row, want.token_of_row, "token_of_row"));
  EXPECT_TRUE(test::same_bits(b.row_of, a.row_of, "row_of (second run)"));
}

TEST(ExpertOffsets, MatchReference) {
  MOEFUSE_REQUIRE_HOPPER();
  for (int64_t E : {1, 7, 512, 1024}) {
    for (int64_t align : {1, 8, 128}) {
      std::vector<int32_t> counts(E), want(E + 1);
      std::uniform_int_distribution<int> dist(0, 3000);
      for (auto& c : counts) c = dist(test::rng()) < 300 ? 0 : dist(test::rng());  // some empty
      ref::expert_offsets(test::host_view(counts, DType::kInt32, {E}),
                          test::host_view(want, DType::kInt32, {E + 1}), align);
      DeviceBuffer<int32_t> g_counts(counts), g_off(E + 1);
      g_off.poison(0x7F);
      expert_offsets(g_counts.view(DType::kInt32, {E}), g_off.view(DType::kInt32, {E + 1}), align,
                     nullptr);
      EXPECT_TRUE(test::same_bits(g_off.download(), want, "offsets")) << "E=" << E << " align=" << align;
    }
  }
}

TEST(DispatchMaps, OutOfRangeExpertSetsHealthFlagAndGetsNoRow) {
  MOEFUSE_REQUIRE_HOPPER();
  const int64_t T = 37, E = 16, k = 2, R = T * k;
  auto idx = random_routes(T, E, k, false);
  idx[11] = static_cast<int32_t>(E);  // token 5, j 1
  idx[20] = -3;                        // token 10, j 0
  int32_t bits = 0;
  const Maps got = gpu_maps(idx, T, E, k, 1, R, &bits);
  EXPECT_EQ(bits & kHealthExpertOutOfRange, kHealthExpertOutOfRange);
  EXPECT_EQ(got.row_of[11], -1);
  EXPECT_EQ(got.row_of[20], -1);
  EXPECT_EQ(got.offsets[E], R - 2);
}

}  // namespace
}  // namespace moefuse
