#include "ref/ep.h"

#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "dist/ep_layout.h"
#include "moefuse/error.h"
#include "ref/check.h"

namespace moefuse::ref {
namespace {

std::string at(std::string_view name, int64_t i) {
  return std::string(name) + "[" + std::to_string(i) + "]";
}

// One transfer, checked: the gathered offsets, the row size and both sides' views.
struct Transfer {
  dist::GatheredOffsets g;
  int64_t row_bytes;
  std::span<const TensorView> sources, receivers;  // xs / ys per rank, recv / ys_recv per rank

  // Calls f(source, receiver, bytes) with the first byte of each non-empty segment (receiver d,
  // local expert l, source s) on both sides, in ep_layout.h's order.
  template <class F>
  void for_each_segment(F&& f) const {
    const int el = dist::experts_per_rank(g.experts, g.ranks);
    std::vector<int64_t> starts(static_cast<size_t>(el) * g.ranks + 1);
    for (int d = 0; d < g.ranks; ++d) {
      dist::receive_segment_starts(g, d, starts.data());
      for (int l = 0; l < el; ++l)
        for (int s = 0; s < g.ranks; ++s) {
          const int e = d * el + l;
          if (g.count(s, e) == 0) continue;  // an empty rank's view may hold no data at all
          f(static_cast<char*>(sources[s].data) + g.first_row(s, e) * row_bytes,
            static_cast<char*>(receivers[d].data) + starts[l * g.ranks + s] * row_bytes,
            g.count(s, e) * row_bytes);
        }
    }
  }
};

// The checks dispatch and return share; the names are those of the caller's arguments.
Transfer check_transfer(const TensorView& offsets, std::span<const TensorView> sources,
                        std::string_view source_name, std::span<const TensorView> receivers,
                        std::string_view receiver_name) {
  const int64_t R = static_cast<int64_t>(sources.size());
  MOEFUSE_EXPECT(R >= 1 && R <= std::numeric_limits<int>::max(), source_name,
                 "one view per rank, at least one", std::to_string(R) + " views");
  MOEFUSE_EXPECT(static_cast<int64_t>(receivers.size()) == R, receiver_name,
                 std::to_string(R) + " views, one per rank", std::to_string(receivers.size()));
  expect_i32(offsets, "offsets", {R, kAnyExtent});
  const int64_t E = offsets.size(1) - 1;
  MOEFUSE_EXPECT(E >= 1 && E % R == 0 && E <= std::numeric_limits<int>::max(), "offsets",
                 "[ranks, E + 1] with E a positive multiple of ranks (" + std::to_string(R) + ")",
                 "shape " + shape_string(offsets));
  const DType dtype = sources[0].dtype;
  MOEFUSE_EXPECT(dtype_bits(dtype) % 8 == 0, at(source_name, 0), "a dtype of whole bytes",
                 std::string(dtype_name(dtype)));
  expect_tensor(sources[0], at(source_name, 0), dtype, Device::kCpu, {kAnyExtent, kAnyExtent});
  const int64_t H = sources[0].size(1);
  const dist::GatheredOffsets g{offsets.as<const int32_t>(), static_cast<int>(R),
                                static_cast<int>(E)};
  for (int s = 0; s < R; ++s) {
    expect_tensor(sources[s], at(source_name, s), dtype, Device::kCpu, {kAnyExtent, H});
    const TensorView row = TensorView::contiguous(const_cast<int32_t*>(&g.offsets[s * (E + 1)]),
                                                  DType::kInt32, {E + 1});
    expect_offsets(row, at("offsets", s), E, sources[s].size(0));
  }
  std::vector<int64_t> starts(E + 1);  // El·R + 1 = E + 1
  for (int d = 0; d < R; ++d) {
    dist::receive_segment_starts(g, d, starts.data());
    const int64_t received = starts[E];
    MOEFUSE_EXPECT(received <= std::numeric_limits<int32_t>::max(), "offsets",
                   "under 2^31 rows received by each rank (int32 receive offsets)",
                   std::to_string(received) + " rows to rank " + std::to_string(d));
    expect_tensor(receivers[d], at(receiver_name, d), dtype, Device::kCpu, {kAnyExtent, H});
    MOEFUSE_EXPECT(receivers[d].size(0) >= received, at(receiver_name, d),
                   "at least the " + std::to_string(received) + " rows rank " +
                       std::to_string(d) + " receives",
                   "shape " + shape_string(receivers[d]));
  }
  return {g, H * dtype_bits(dtype) / 8, sources, receivers};
}

}  // namespace

void ep_dispatch(const TensorView& offsets, std::span<const TensorView> xs,
                 std::span<const TensorView> recv, std::span<const TensorView> recv_offsets) {
  const Transfer t = check_transfer(offsets, xs, "xs", recv, "recv");
  const int el = dist::experts_per_rank(t.g.experts, t.g.ranks);
  MOEFUSE_EXPECT(static_cast<int64_t>(recv_offsets.size()) == t.g.ranks, "recv_offsets",
                 std::to_string(t.g.ranks) + " views, one per rank",
                 std::to_string(recv_offsets.size()));
  for (int d = 0; d < t.g.ranks; ++d) expect_i32(recv_offsets[d], at("recv_offsets", d), {el + 1});
  t.for_each_segment([](const char* source, char* receiver, int64_t bytes) {
    std::memcpy(receiver, source, bytes);
  });
  for (int d = 0; d < t.g.ranks; ++d)
    dist::receive_expert_offsets(t.g, d, recv_offsets[d].as<int32_t>());
}

void ep_return(const TensorView& offsets, std::span<const TensorView> ys_recv,
               std::span<const TensorView> ys) {
  const Transfer t = check_transfer(offsets, ys, "ys", ys_recv, "ys_recv");
  t.for_each_segment([](char* source, const char* receiver, int64_t bytes) {
    std::memcpy(source, receiver, bytes);
  });
}

MoeConfig ep_expert_config(const MoeConfig& config, int ranks) {
  config.validate();
  MOEFUSE_EXPECT(ranks >= 1 && config.num_experts % ranks == 0, "ranks",
                 "a positive divisor of config.num_experts (" +
                     std::to_string(config.num_experts) + ")",
                 std::to_string(ranks));
  MoeConfig local = config;
  local.num_experts = config.num_experts / ranks;
  local.top_k = 1;
  local.router = RouterOptions{};
  local.shared_expert_ffn = 0;
  return local;
}

ExpertWeights ep_expert_slice(const ExpertWeights& weights, int ranks, int rank) {
  MOEFUSE_EXPECT(ranks >= 1, "ranks", "at least 1", std::to_string(ranks));
  MOEFUSE_EXPECT(rank >= 0 && rank < ranks, "rank", "in [0, " + std::to_string(ranks) + ")",
                 std::to_string(rank));
  const auto slice = [&](const TensorView& w, std::string_view name) {
    if (is_absent(w)) return w;
    MOEFUSE_EXPECT(w.rank >= 1 && w.size(0) % ranks == 0, name,
                   "a leading extent divisible by ranks (" + std::to_string(ranks) + ")",
                   "shape " + shape_string(w));
    TensorView out = w;
    out.shape[0] = w.size(0) / ranks;
    out.data = static_cast<char*>(w.data) + rank * out.shape[0] * w.stride(0) *
                                                dtype_bits(w.dtype) / 8;
    return out;
  };
  return {.w1 = slice(weights.w1, "weights.w1"), .b1 = slice(weights.b1, "weights.b1"),
          .w2 = slice(weights.w2, "weights.w2"), .b2 = slice(weights.b2, "weights.b2")};
}

}  // namespace moefuse::ref
