// moefuse-ep-bench's routing: each rank's T·k rows drawn uniformly over the E experts (a
// multinomial), and the bytes that this makes each rank send, counted exactly from the offsets.
#pragma once

#include <cstdint>
#include <vector>

namespace moefuse::ep_bench {

struct Workload {
  int ranks = 0;
  int64_t experts = 0, hidden = 0;
  std::vector<std::vector<int32_t>> offsets;  // [R][E + 1], each rank's expert-contiguous rows
  std::vector<std::vector<int64_t>> rows;     // [R][R]: rows rank s routes to rank d's experts

  // Bytes leaving rank s in dispatch: its rows for other ranks' experts, bf16 [H] each.
  int64_t dispatch_bytes(int s) const;
  // Bytes leaving rank d in return_rows: the rows other ranks sent it, going back.
  int64_t return_bytes(int d) const;
  // What the NCCL all-to-all baseline sends from rank s to each other rank: s's dispatch bytes
  // spread evenly over the R - 1 peers (rounded down).
  int64_t all_to_all_peer_bytes(int s) const { return dispatch_bytes(s) / (ranks - 1); }
};

// E must be a multiple of `ranks` (rank d owns experts [d·E/R, (d+1)·E/R)).
Workload draw_workload(int ranks, int64_t experts, int64_t hidden, int64_t rows_per_rank,
                       uint64_t seed);

}  // namespace moefuse::ep_bench
