#include "ep_bench/workload.h"

#include <random>

namespace moefuse::ep_bench {

int64_t Workload::dispatch_bytes(int s) const {
  int64_t n = 0;
  for (int d = 0; d < ranks; ++d) n += d == s ? 0 : rows[s][d];
  return n * hidden * 2;
}

int64_t Workload::return_bytes(int d) const {
  int64_t n = 0;
  for (int s = 0; s < ranks; ++s) n += s == d ? 0 : rows[s][d];
  return n * hidden * 2;
}

Workload draw_workload(int ranks, int64_t experts, int64_t hidden, int64_t rows_per_rank,
                       uint64_t seed) {
  Workload w{.ranks = ranks, .experts = experts, .hidden = hidden};
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int64_t> expert(0, experts - 1);
  const int64_t per_rank = experts / ranks;
  for (int s = 0; s < ranks; ++s) {
    std::vector<int32_t> counts(experts, 0);
    for (int64_t i = 0; i < rows_per_rank; ++i) ++counts[expert(rng)];
    std::vector<int32_t> offsets(experts + 1, 0);
    std::vector<int64_t> to(ranks, 0);
    for (int64_t e = 0; e < experts; ++e) {
      offsets[e + 1] = offsets[e] + counts[e];
      to[e / per_rank] += counts[e];
    }
    w.offsets.push_back(std::move(offsets));
    w.rows.push_back(std::move(to));
  }
  return w;
}

}  // namespace moefuse::ep_bench
