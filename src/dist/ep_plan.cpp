#include "dist/ep_plan.h"

#include <cstdint>
#include <limits>
#include <string>

#include "dist/ep_layout.h"
#include "moefuse/error.h"

namespace moefuse::dist {

EpPlan make_ep_plan(const EpPlanArgs& a) {
  const auto str = [](int64_t v) { return std::to_string(v); };
  MOEFUSE_EXPECT(a.ranks >= 1, "ranks", "at least 1", str(a.ranks));
  MOEFUSE_EXPECT(a.rank >= 0 && a.rank < a.ranks, "rank", "in [0, " + str(a.ranks) + ")",
                 str(a.rank));
  MOEFUSE_EXPECT(a.experts >= 1 && a.experts % a.ranks == 0, "experts",
                 "a positive multiple of ranks (" + str(a.ranks) + ")", str(a.experts));
  MOEFUSE_EXPECT(a.top_k >= 1 && a.top_k <= a.experts, "top_k",
                 "in [1, experts] ([1, " + str(a.experts) + "])", str(a.top_k));
  constexpr int64_t kMaxRows = std::numeric_limits<int32_t>::max();
  // Every row sent to a rank counts in its int32 receive offsets (ep_layout.h) before the
  // capacity drops any: the worst case, ranks·max_tokens_per_rank·top_k, must be below 2^31 even
  // when a smaller capacity is given. Checked before multiplying (no int64 overflow either).
  const int64_t max_tokens = kMaxRows / (int64_t{a.top_k} * a.ranks);
  MOEFUSE_EXPECT(a.max_tokens_per_rank >= 1 && a.max_tokens_per_rank <= max_tokens,
                 "max_tokens_per_rank",
                 "in [1, " + str(max_tokens) + "] (ranks·max_tokens_per_rank·top_k rows < 2^31)",
                 str(a.max_tokens_per_rank));
  const int64_t send_rows = a.max_tokens_per_rank * a.top_k;
  const int64_t worst = send_rows * a.ranks;
  const bool given = a.receive_capacity_rows != 0;
  const int64_t capacity = given ? a.receive_capacity_rows : worst;
  MOEFUSE_EXPECT(capacity >= 1 && capacity <= worst, "receive_capacity_rows",
                 "in [1, " + str(worst) + "] (0: the worst case ranks·max_tokens_per_rank·top_k)",
                 str(capacity));
  const int el = experts_per_rank(a.experts, a.ranks);
  return {.experts = a.experts, .ranks = a.ranks, .rank = a.rank, .experts_per_rank = el,
          .first_expert = a.rank * el, .send_rows = send_rows, .receive_capacity_rows = capacity};
}

}  // namespace moefuse::dist
