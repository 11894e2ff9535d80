// moefuse-ep-bench's layer part: EpMoeLayer (moefuse/ep_layer.h) forward + backward on every rank,
// timed eagerly and as one CUDA graph, with each stage's time (the transfers' are the exposed
// communication: nothing overlaps them on the critical stream yet), and the one-GPU MoeLayer on
// the same tokens per GPU as the baseline.
#pragma once

#include <nccl.h>

#include <barrier>
#include <cstdint>
#include <utility>
#include <vector>

#include "moefuse/config.h"
#include "moefuse/layer.h"

namespace moefuse::ep_bench {

struct LayerTiming {
  int64_t tokens = 0, local_experts = 0;
  double forward_ms = 0;     // eager forward, median
  double step_ms = 0;        // eager forward + backward, median
  double graph_step_ms = 0;  // forward + backward captured as one CUDA graph, median
  double transfer_ms = 0;    // Σ of the four transfer stages' medians (ep_dispatch, ep_return
                             // and their backward twins) in observed eager steps
  std::vector<std::pair<LayerStage, double>> stages;  // median ms per stage, observed steps
};

// Rank `rank`'s EpMoeLayer over `comm` on the current device: fresh random tokens and weights
// (the router's choices on them), `warmup` then `iters` steps per timing, every timing started on
// all ranks together (`together`). Throws when the transport flags a dropped row or bad offsets.
LayerTiming time_ep_layer(const MoeConfig& config, int64_t tokens, uint64_t seed, int warmup,
                          int iters, ncclComm_t comm, std::barrier<>& together);

// The one-GPU MoeLayer (fused, all E experts) on the current device, the same T tokens.
LayerTiming time_one_gpu_layer(const MoeConfig& config, int64_t tokens, uint64_t seed, int warmup,
                               int iters);

}  // namespace moefuse::ep_bench
