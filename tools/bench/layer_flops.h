// The model FLOPs of one MoE layer call, what every layer benchmark divides by its time.
#pragma once

#include <cstdint>

#include "moefuse/config.h"

namespace moefuse::bench {

struct Flops {
  double forward, backward;
};
// Forward: 2·T·k·H·(fc1 + F) for the routed experts, plus the shared expert's 2·T·H·(its fc1 +
// its F); backward twice the forward (dgrad and wgrad of every GEMM). The router's GEMM is not
// counted.
inline Flops model_flops(const MoeConfig& c, int64_t T) {
  double f = 2.0 * T * c.top_k * c.hidden * (c.fc1_width() + c.ffn);
  if (c.shared_expert_ffn > 0) {
    const MoeConfig s = shared_expert_config(c);
    f += 2.0 * T * c.hidden * (s.fc1_width() + s.ffn);
  }
  return {.forward = f, .backward = 2 * f};
}

}  // namespace moefuse::bench
