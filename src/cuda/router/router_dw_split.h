// How the router's dWr = d_logitsᵀ·x GEMM (m=H n=E k=T) is split along T. Its output has few
// tiles (H/128 · E/128: 16 for qwen3), so one GEMM runs on a handful of SMs for a K of T; cut into
// `parts` chunks of K, it fills the GPU, each chunk writing an fp32 partial that a fixed-order
// sum adds up (deterministic). Pure host arithmetic, tested on the CPU.
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

// tokens ≥ 1; capacity_bytes: room for the fp32 [parts, E, H] partials.
inline DwSplit plan_dw_split(int64_t tokens, int64_t hidden, int64_t experts, int num_sms,
                             size_t capacity_bytes) {
  const int64_t tiles = ((hidden + 127) / 128) * ((experts + 127) / 128);
  const int64_t want = (num_sms + tiles - 1) / tiles;
  const int64_t by_k = tokens / kDwMinChunk;
  const int64_t by_memory =
      static_cast<int64_t>(capacity_bytes / (sizeof(float) * static_cast<size_t>(experts * hidden)));
  const int64_t splits = std::max<int64_t>(1, std::min({want, by_k, by_memory}));
  if (splits == 1) return {.chunk = tokens, .parts = 1};
  // chunk ≥ tokens / splits, so ceil(tokens / chunk) ≤ splits parts: the partials fit.
  const int64_t chunk = ((tokens + splits - 1) / splits + kDwChunkAlign - 1) / kDwChunkAlign *
                        kDwChunkAlign;
  return {.chunk = chunk, .parts = (tokens + chunk - 1) / chunk};
}

}  // namespace moefuse::cuda
