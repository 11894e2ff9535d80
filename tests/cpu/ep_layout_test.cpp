// dist/ep_layout.h on hand-made offsets: the segment starts and receive offsets of every rank
// where the layout has edges (one rank, an expert or a rank with no rows, all rows on one expert).
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "dist/ep_layout.h"

namespace moefuse::dist {
namespace {

// Every rank's offsets [E+1], rank by rank.
using Offsets = std::vector<std::vector<int32_t>>;

struct Received {
  std::vector<int64_t> starts;   // [El·R + 1]
  std::vector<int32_t> offsets;  // [El + 1]
};

Received receive(const Offsets& per_rank, int d) {
  const int R = static_cast<int>(per_rank.size());
  const int E = static_cast<int>(per_rank[0].size()) - 1;
  std::vector<int32_t> gathered;
  for (const auto& o : per_rank) gathered.insert(gathered.end(), o.begin(), o.end());
  const GatheredOffsets g{gathered.data(), R, E};
  Received r{std::vector<int64_t>(E + 1), std::vector<int32_t>(E / R + 1)};
  receive_segment_starts(g, d, r.starts.data());
  receive_expert_offsets(g, d, r.offsets.data());
  return r;
}

// One rank receives its own rows in place: starts and offsets are its offsets.
TEST(EpLayout, OneRankIsTheIdentity) {
  const Offsets o = {{0, 3, 3, 7, 8}};
  const Received r = receive(o, 0);
  EXPECT_EQ(r.starts, (std::vector<int64_t>{0, 3, 3, 7, 8}));
  EXPECT_EQ(r.offsets, o[0]);
}

// R = 2, E = 4. Rank 0's expert 1 and rank 1's expert 2 are empty; their segments have no rows
// and the next segment starts where they do.
TEST(EpLayout, AnExpertWithNoTokens) {
  const Offsets o = {{0, 2, 2, 5, 6}, {0, 1, 3, 3, 4}};
  const Received r0 = receive(o, 0);  // experts 0, 1: counts (2, 1), (0, 2)
  EXPECT_EQ(r0.starts, (std::vector<int64_t>{0, 2, 3, 3, 5}));
  EXPECT_EQ(r0.offsets, (std::vector<int32_t>{0, 3, 5}));
  const Received r1 = receive(o, 1);  // experts 2, 3: counts (3, 0), (1, 1)
  EXPECT_EQ(r1.starts, (std::vector<int64_t>{0, 3, 3, 4, 5}));
  EXPECT_EQ(r1.offsets, (std::vector<int32_t>{0, 3, 5}));
}

// R = 3, E = 6: rank 1 routes no tokens (all its offsets 0); every rank still gets a segment of
// it, of no rows, between rank 0's and rank 2's.
TEST(EpLayout, ARankThatSendsNothing) {
  const Offsets o = {{0, 1, 2, 3, 4, 5, 6}, {0, 0, 0, 0, 0, 0, 0}, {0, 2, 2, 2, 2, 2, 4}};
  const Received r0 = receive(o, 0);  // experts 0, 1: counts (1, 0, 2), (1, 0, 0)
  EXPECT_EQ(r0.starts, (std::vector<int64_t>{0, 1, 1, 3, 4, 4, 4}));
  EXPECT_EQ(r0.offsets, (std::vector<int32_t>{0, 3, 4}));
  const Received r2 = receive(o, 2);  // experts 4, 5: counts (1, 0, 0), (1, 0, 2)
  EXPECT_EQ(r2.starts, (std::vector<int64_t>{0, 1, 1, 1, 2, 2, 4}));
  EXPECT_EQ(r2.offsets, (std::vector<int32_t>{0, 1, 4}));
}

// R = 2, E = 4: nobody routes to experts 2 and 3, so rank 1 receives nothing.
TEST(EpLayout, ARankThatReceivesNothing) {
  const Offsets o = {{0, 2, 5, 5, 5}, {0, 4, 4, 4, 4}};
  const Received r1 = receive(o, 1);
  EXPECT_EQ(r1.starts, (std::vector<int64_t>{0, 0, 0, 0, 0}));
  EXPECT_EQ(r1.offsets, (std::vector<int32_t>{0, 0, 0}));
  const Received r0 = receive(o, 0);  // counts (2, 4), (3, 0)
  EXPECT_EQ(r0.starts, (std::vector<int64_t>{0, 2, 6, 9, 9}));
  EXPECT_EQ(r0.offsets, (std::vector<int32_t>{0, 6, 9}));
}

// R = 4, E = 8: every row on expert 5 (rank 2's second); rank 2 gets them all, source by source.
TEST(EpLayout, AllTokensOnOneExpert) {
  const Offsets o = {{0, 0, 0, 0, 0, 0, 3, 3, 3}, {0, 0, 0, 0, 0, 0, 1, 1, 1},
                     {0, 0, 0, 0, 0, 0, 0, 0, 0}, {0, 0, 0, 0, 0, 0, 5, 5, 5}};
  const Received r2 = receive(o, 2);
  EXPECT_EQ(r2.starts, (std::vector<int64_t>{0, 0, 0, 0, 0, 3, 4, 4, 9}));
  EXPECT_EQ(r2.offsets, (std::vector<int32_t>{0, 0, 9}));
  for (int d : {0, 1, 3}) {
    EXPECT_EQ(receive(o, d).starts, std::vector<int64_t>(9, 0)) << "rank " << d;
    EXPECT_EQ(receive(o, d).offsets, std::vector<int32_t>(3, 0)) << "rank " << d;
  }
}

}  // namespace
}  // namespace moefuse::dist
