// moefuse-ep-bench's layer part: EpMoeLayer (moefuse/ep_layer.h) forward + backward on every rank,
// timed eagerly and as one CUDA graph, with each stage's time and the exposed transfer time
// (step_intervals.h), and the one-GPU MoeLayer on the same tokens per GPU as the baseline.
#pragma once

#include <nccl.h>

#include <barrier>
#include <cstdint>
#include <map>

#include "moefuse/config.h"
#include "moefuse/ep_layer.h"
#include "moefuse/layer.h"

namespace moefuse::ep_bench {

struct LayerTiming {
  int64_t tokens = 0, local_experts = 0;
  double forward_ms = 0;     // eager forward, median
  double step_ms = 0;        // eager forward + backward, median
  double graph_step_ms = 0;  // forward + backward captured as one CUDA graph, median
  // Observed eager steps (medians): the transfer stages' time (their union), the part of it in
  // which no other stage runs on any stream, and every stage's time per step.
  double transfer_ms = 0, exposed_transfer_ms = 0;
  std::map<LayerStage, double> stages;
};

// Rank `rank`'s EpMoeLayer over `comm` on the current device with `options` (max_tokens_per_rank
// = tokens): fresh random tokens and weights (the router's choices on them), `warmup` then
// `iters` steps per timing, every timing started on all ranks together (`together`). Throws when
// the transport flags a dropped row or bad offsets.
LayerTiming time_ep_layer(const MoeConfig& config, EpLayerOptions options, int64_t tokens,
                          uint64_t seed, int warmup, int iters, ncclComm_t comm,
                          std::barrier<>& together);

// The one-GPU MoeLayer (fused, all E experts) on the current device, the same T tokens.
LayerTiming time_one_gpu_layer(const MoeConfig& config, int64_t tokens, uint64_t seed, int warmup,
                               int iters);

}  // namespace moefuse::ep_bench
