// Synthetic routing for the GEMM and layer benchmarks: which experts each token picks, drawn on
// the host (the benchmark may know the counts; the kernels it times never read them on the host).
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

namespace moefuse::bench {

enum class RoutingDistribution {
  kUniform,  // every token picks k distinct experts uniformly at random
  kZipf,     // expert popularity ∝ 1/rank^1.2 (ranks a random permutation), k distinct per token
  // Token t picks experts (t·k + j) mod E, j < k: every expert T·k / E rows where E divides T·k
  // (no expert's last m-block partly empty where that is a multiple of the tile's 128 rows: the
  // best case of uniform routing, against which its partial m-blocks are measured).
  kBalanced,
};

RoutingDistribution parse_routing(std::string_view name);  // "uniform" | "zipf" | "balanced"

struct SyntheticRouting {
  std::vector<int32_t> expert_idx;    // [T, k]
  std::vector<int32_t> counts;        // [E]
  std::vector<int32_t> offsets;       // [E+1]
  std::vector<int32_t> row_of;        // [T, k]
  std::vector<int32_t> token_of_row;  // [T·k]
};

// The maps come from the CPU reference (ref::dispatch_maps), so they are exactly the ones the GPU
// dispatch produces.
SyntheticRouting draw_routing(int64_t tokens, int64_t experts, int64_t top_k,
                              RoutingDistribution distribution, uint64_t seed);

}  // namespace moefuse::bench
