// How the router's dWr = d_logitsᵀ·x GEMM (m=H n=E k=T) is split along T. Its output has few
// tiles (H/128 · E/128: 16 for qwen3), so one GEMM runs on a handful of SMs for a K of T; cut into
// `parts` chunks of K, it fills the GPU, each chunk writing an fp32 partial that a fixed-order
// sum adds up (deterministic). Pure host arithmetic, tested on the CPU; `moefuse-bench dispatch`
// times the plan's part count against one more.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>

namespace moefuse::cuda {

inline constexpr int64_t kDwMinChunk = 1024;  // tokens per split at least: keeps each GEMM long-K
inline constexpr int64_t kDwChunkAlign = 8;   // chunk % 8 == 0: 16-byte aligned chunk starts

struct DwSplit {
  int64_t chunk;  // tokens per part (the last part may be shorter)
  int64_t parts;  // 1: no split, the GEMM writes d_w_router itself
};

// T cut into `splits` chunks of whole kDwChunkAlign tokens (the last part may be shorter; a
// chunk ≥ tokens / splits, so there are at most `splits` parts). tokens ≥ 1.
inline DwSplit dw_split_into(int64_t tokens, int64_t splits) {
  if (splits <= 1) return {.chunk = tokens, .parts = 1};
  const int64_t chunk = ((tokens + splits - 1) / splits + kDwChunkAlign - 1) / kDwChunkAlign *
                        kDwChunkAlign;
  return {.chunk = chunk, .parts = (tokens + chunk - 1) / chunk};
}

// tokens ≥ 1; capacity_bytes: room for the fp32 [parts, E, H] partials. As many parts as one
// wave of output tiles holds (parts · tiles ≤ SMs): one part more would give a few SMs a second
// tile each, and the GEMM lasts as long as its busiest SM.
inline DwSplit plan_dw_split(int64_t tokens, int64_t hidden, int64_t experts, int num_sms,
                             size_t capacity_bytes) {
  const int64_t tiles = ((hidden + 127) / 128) * ((experts + 127) / 128);
  const int64_t want = num_sms / tiles;
  const int64_t by_k = tokens / kDwMinChunk;
  const int64_t by_memory =
      static_cast<int64_t>(capacity_bytes / (sizeof(float) * static_cast<size_t>(experts * hidden)));
  return dw_split_into(tokens, std::max<int64_t>(1, std::min({want, by_k, by_memory})));
}

}  // namespace moefuse::cuda
