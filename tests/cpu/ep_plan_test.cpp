// dist/ep_plan.h: the plan's fields, the worst-case receive capacity, and every bad argument
// named in the InvalidArgument it throws.
#include <gtest/gtest.h>

#include <cstdint>

#include "common/test_util.h"
#include "dist/ep_plan.h"

namespace moefuse::dist {
namespace {

using test::expect_invalid;

constexpr EpPlanArgs kGood{.experts = 64, .ranks = 8, .rank = 3, .max_tokens_per_rank = 4096,
                           .top_k = 4};

TEST(EpPlan, WorstCaseCapacity) {
  const EpPlan p = make_ep_plan(kGood);
  EXPECT_EQ(p.experts_per_rank, 8);
  EXPECT_EQ(p.first_expert, 24);
  EXPECT_EQ(p.send_rows, 4096 * 4);
  EXPECT_EQ(p.receive_capacity_rows, 8 * 4096 * 4);
}

TEST(EpPlan, GivenCapacity) {
  EpPlanArgs a = kGood;
  a.receive_capacity_rows = 20000;
  EXPECT_EQ(make_ep_plan(a).receive_capacity_rows, 20000);
  a = {.experts = 8, .ranks = 1, .rank = 0, .max_tokens_per_rank = 1, .top_k = 8};
  const EpPlan one = make_ep_plan(a);
  EXPECT_EQ(one.experts_per_rank, 8);
  EXPECT_EQ(one.first_expert, 0);
  EXPECT_EQ(one.receive_capacity_rows, 8);
}

// Each bad field, alone, is the one the error names.
TEST(EpPlan, BadArgumentsAreNamed) {
  const auto bad = [](auto edit, const char* name) {
    EpPlanArgs a = kGood;
    edit(a);
    expect_invalid([&] { make_ep_plan(a); }, name);
  };
  bad([](EpPlanArgs& a) { a.ranks = 0; }, "ranks");
  bad([](EpPlanArgs& a) { a.rank = -1; }, "rank");
  bad([](EpPlanArgs& a) { a.rank = 8; }, "rank");
  bad([](EpPlanArgs& a) { a.experts = 60; }, "experts");  // 60 % 8 != 0
  bad([](EpPlanArgs& a) { a.experts = 0; }, "experts");
  bad([](EpPlanArgs& a) { a.top_k = 0; }, "top_k");
  bad([](EpPlanArgs& a) { a.top_k = 65; }, "top_k");
  bad([](EpPlanArgs& a) { a.max_tokens_per_rank = 0; }, "max_tokens_per_rank");
  bad([](EpPlanArgs& a) { a.max_tokens_per_rank = int64_t{1} << 29; }, "max_tokens_per_rank");
  bad([](EpPlanArgs& a) { a.receive_capacity_rows = -1; }, "receive_capacity_rows");
  bad([](EpPlanArgs& a) { a.receive_capacity_rows = int64_t{1} << 31; }, "receive_capacity_rows");
  // Above the worst case, 8·4096·4 rows: memory no step can use.
  bad([](EpPlanArgs& a) { a.receive_capacity_rows = 8 * 4096 * 4 + 1; }, "receive_capacity_rows");
  // 2^28·4 = 2^30 rows sent fit int32, but the worst case receives 8× that: every row sent to a
  // rank counts in its int32 receive offsets, whatever capacity is given.
  bad([](EpPlanArgs& a) { a.max_tokens_per_rank = int64_t{1} << 28; }, "max_tokens_per_rank");
  bad([](EpPlanArgs& a) {
    a.max_tokens_per_rank = int64_t{1} << 28;
    a.receive_capacity_rows = 1000;
  }, "max_tokens_per_rank");
}

TEST(EpPlan, LargestSizesFit) {
  EpPlanArgs a = kGood;
  a.receive_capacity_rows = 8 * 4096 * 4;  // the worst case, given
  EXPECT_EQ(make_ep_plan(a).receive_capacity_rows, 8 * 4096 * 4);
  // The most tokens whose worst case, 8 ranks · 4 rows a token, stays below 2^31.
  const int64_t most = ((int64_t{1} << 31) - 1) / 32;
  a = kGood;
  a.max_tokens_per_rank = most;
  EXPECT_EQ(make_ep_plan(a).receive_capacity_rows, most * 32);
  a.max_tokens_per_rank = most + 1;
  expect_invalid([&] { make_ep_plan(a); }, "max_tokens_per_rank");
}

}  // namespace
}  // namespace moefuse::dist
