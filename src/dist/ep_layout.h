// Expert parallelism (EP): where the rows of each rank go, computed the same way on the host (CPU
// reference, tests) and on the device (the transfer kernels), so that both agree to the row.
//
// R ranks share E experts, E % R == 0; rank d owns the E / R experts [d·El, (d+1)·El). Every rank
// s routes its own T_s tokens over all E experts and permutes them as one GPU does
// (moefuse/dispatch.h): xs_s is expert-contiguous, expert e's rows at [off_s[e], off_s[e+1]),
// tokens in increasing order inside an expert. The rows s sends to d are then one slab of xs_s,
// experts d·El .. (d+1)·El - 1.
//
// Rank d receives them expert-major, then by source rank: local expert l's rows are those of
// source 0, then source 1, ..., each in its own token order. That is exactly the order a single
// GPU gives expert d·El + l for the batch of all ranks' tokens concatenated in rank order, so the
// expert GEMMs on d see the rows (and sum them, in the weight gradients) in the single-GPU order:
//
//   recv_d[segment_start(l, s) + i] = xs_s[off_s[d·El + l] + i],  i < count(s, d·El + l)
//   segment_start(l, s) = sum_{l' < l} sum_{s'} count(s', d·El + l')
//                       + sum_{s' < s} count(s', d·El + l)
//
// and the expert outputs return along the same map reversed (ys_s[off_s[e] + i] = ys_recv_d[...]),
// after which each rank combines its own tokens as one GPU does. Counts come from the gathered
// offsets of all ranks: count(s, e) = off_s[e + 1] - off_s[e] (no padding: align 1).
#pragma once

#include <cstdint>

#include "formats/host_device.h"

namespace moefuse::dist {

// offsets of all ranks, [ranks][experts + 1] int32, row-major: rank s's offsets at s·(E + 1).
struct GatheredOffsets {
  const int32_t* offsets;
  int ranks, experts;

  MOEFUSE_HD int32_t first_row(int s, int e) const {
    return offsets[static_cast<int64_t>(s) * (experts + 1) + e];
  }
  MOEFUSE_HD int32_t count(int s, int e) const { return first_row(s, e + 1) - first_row(s, e); }
};

MOEFUSE_HD int experts_per_rank(int experts, int ranks) { return experts / ranks; }

// Fills starts [El·R + 1] for receiving rank d: starts[l·R + s] = segment_start(l, s), and
// starts[El·R] = the rows d receives in all. One pass in (l, s) order: O(El·R).
MOEFUSE_HD void receive_segment_starts(const GatheredOffsets& g, int d, int64_t* starts) {
  const int el = experts_per_rank(g.experts, g.ranks);
  int64_t row = 0;
  for (int l = 0; l < el; ++l)
    for (int s = 0; s < g.ranks; ++s) {
      starts[l * g.ranks + s] = row;
      row += g.count(s, d * el + l);
    }
  starts[el * g.ranks] = row;
}

// Rank d's per-expert offsets of its receive buffer, [El + 1] int32 (the local grouped GEMMs'
// offsets): local expert l's rows start at segment_start(l, 0).
MOEFUSE_HD void receive_expert_offsets(const GatheredOffsets& g, int d, int32_t* offsets) {
  const int el = experts_per_rank(g.experts, g.ranks);
  int64_t row = 0;
  for (int l = 0; l < el; ++l) {
    offsets[l] = static_cast<int32_t>(row);
    for (int s = 0; s < g.ranks; ++s) row += g.count(s, d * el + l);
  }
  offsets[el] = static_cast<int32_t>(row);
}

}  // namespace moefuse::dist
