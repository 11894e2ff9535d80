#include "bench/routing.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <string>

#include "moefuse/error.h"
#include "moefuse/tensor.h"
#include "ref/dispatch.h"

namespace moefuse::bench {

RoutingDistribution parse_routing(std::string_view name) {
  if (name == "uniform") return RoutingDistribution::kUniform;
  if (name == "zipf") return RoutingDistribution::kZipf;
  if (name == "balanced") return RoutingDistribution::kBalanced;
  throw InvalidArgument("--routing", "uniform, zipf or balanced", "'" + std::string(name) + "'");
}

SyntheticRouting draw_routing(int64_t tokens, int64_t experts, int64_t top_k,
                              RoutingDistribution distribution, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<double> weight(experts, 1.0);
  if (distribution == RoutingDistribution::kZipf) {
    std::vector<int64_t> rank(experts);
    std::iota(rank.begin(), rank.end(), 0);
    std::shuffle(rank.begin(), rank.end(), rng);
    for (int64_t e = 0; e < experts; ++e) weight[e] = std::pow(rank[e] + 1.0, -1.2);
  }
  SyntheticRouting r;
  r.expert_idx.resize(tokens * top_k);
  r.counts.assign(experts, 0);
  // k distinct experts per token: Efraimidis–Spirakis weighted sampling without replacement
  // (the k largest u^(1/w) keys).
  std::uniform_real_distribution<double> uniform(0.0, 1.0);
  std::vector<std::pair<double, int32_t>> keys(experts);
  for (int64_t t = 0; t < tokens; ++t) {
    if (distribution == RoutingDistribution::kBalanced) {
      for (int64_t j = 0; j < top_k; ++j)
        keys[j].second = static_cast<int32_t>((t * top_k + j) % experts);
    } else {
      for (int64_t e = 0; e < experts; ++e)
        keys[e] = {std::log(uniform(rng) + 1e-300) / weight[e], static_cast<int32_t>(e)};
      std::partial_sort(keys.begin(), keys.begin() + top_k, keys.end(), std::greater<>());
    }
    for (int64_t j = 0; j < top_k; ++j) {
      r.expert_idx[t * top_k + j] = keys[j].second;
      ++r.counts[keys[j].second];
    }
  }
  r.offsets.resize(experts + 1);
  r.row_of.resize(tokens * top_k);
  r.token_of_row.resize(tokens * top_k);
  auto view = [](std::vector<int32_t>& v, std::initializer_list<int64_t> shape) {
    return TensorView::contiguous(v.data(), DType::kInt32, shape);
  };
  ref::expert_offsets(view(r.counts, {experts}), view(r.offsets, {experts + 1}));
  ref::dispatch_maps(view(r.expert_idx, {tokens, top_k}), view(r.offsets, {experts + 1}),
                     view(r.row_of, {tokens, top_k}), view(r.token_of_row, {tokens * top_k}));
  return r;
}

}  // namespace moefuse::bench
