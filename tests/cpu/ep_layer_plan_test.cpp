// dist/ep_layer_plan.h, the expert-parallel layer's memory plan (host arithmetic, no GPU): the
// buffers live together never overlap, each has the extent its side of the transfer needs (this
// rank's rows, the transport's send bound S, the receive capacity C), and the sizes for the most
// tokens cover every smaller call.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "dist/ep_layer_plan.h"
#include "dist/ep_plan.h"
#include "moefuse/config.h"
#include "moefuse/layer.h"

namespace moefuse::dist {
namespace {

bool overlap(const LayerBuffer& a, const LayerBuffer& b) {
  return a.offset < b.offset + b.bytes && b.offset < a.offset + a.bytes;
}

// Buffers of `regions` pairwise disjoint, every one 256-byte aligned.
void expect_disjoint(const EpLayerPlan& p, std::initializer_list<LayerRegion> regions,
                     const std::string& what) {
  std::vector<const LayerBuffer*> live;
  for (const auto& b : p.buffers) {
    EXPECT_EQ(b.offset % 256, 0u) << b.name;
    if (std::find(regions.begin(), regions.end(), b.region) != regions.end()) live.push_back(&b);
  }
  for (size_t i = 0; i < live.size(); ++i)
    for (size_t j = i + 1; j < live.size(); ++j)
      EXPECT_FALSE(overlap(*live[i], *live[j]))
          << what << ": '" << live[i]->name << "' overlaps '" << live[j]->name << "'";
}

const LayerBuffer& named(const EpLayerPlan& p, const std::string& prefix) {
  for (const auto& b : p.buffers)
    if (b.name.rfind(prefix, 0) == 0) return b;
  throw std::runtime_error("no buffer named " + prefix);
}

EpPlan plan_of(const MoeConfig& c, int ranks, int64_t max_tokens, int64_t capacity = 0) {
  return make_ep_plan({.experts = static_cast<int>(c.num_experts), .ranks = ranks, .rank = 1,
                       .max_tokens_per_rank = max_tokens, .top_k = static_cast<int>(c.top_k),
                       .receive_capacity_rows = capacity});
}

TEST(EpLayerPlan, BuffersLiveTogetherAreDisjoint) {
  for (auto name : preset_names()) {
    SCOPED_TRACE(std::string(name));
    const MoeConfig c = preset(name);
    const EpLayerPlan p = make_ep_layer_plan(c, plan_of(c, 8, 4096), 3000);
    // A step's forward and backward scratch share bytes; neither overlaps the common part, and
    // the cache is its own region.
    expect_disjoint(p, {LayerRegion::kCache}, "cache");
    expect_disjoint(p, {LayerRegion::kWorkspaceBoth, LayerRegion::kWorkspaceForward}, "forward");
    expect_disjoint(p, {LayerRegion::kWorkspaceBoth, LayerRegion::kWorkspaceBackward},
                    "backward");
    for (const auto& b : p.buffers)
      EXPECT_LE(b.offset + b.bytes,
                b.region == LayerRegion::kCache ? p.cache_bytes : p.workspace_bytes)
          << b.name;
    EXPECT_EQ(c.shared_expert_ffn > 0, p.shared_offsets.present());
  }
}

// The rows each side holds: this call's T·k (routing), the transport's S = max tokens·k (what is
// sent and returned), the receive capacity C (what the experts compute on).
TEST(EpLayerPlan, ExtentsFollowTheTransport) {
  const MoeConfig c = preset("qwen3-30b-a3b");  // H 2048, F 768, E 128, k 8
  const int64_t T = 1000, max_tokens = 4096, C = 20000, H = c.hidden, k = c.top_k;
  const EpLayerPlan p = make_ep_layer_plan(c, plan_of(c, 4, max_tokens, C), T);
  EXPECT_EQ(p.rows, T * k);
  EXPECT_EQ(p.send_rows, max_tokens * k);
  EXPECT_EQ(p.capacity, C);
  EXPECT_EQ(p.local_experts, c.num_experts / 4);
  EXPECT_EQ(named(p, "probs").bytes, size_t(T * k * 4));
  EXPECT_EQ(named(p, "xs ").bytes, size_t(max_tokens * k * H * 2));
  EXPECT_EQ(named(p, "dys ").bytes, size_t(max_tokens * k * H * 2));
  EXPECT_EQ(named(p, "ys_returned").bytes, size_t(max_tokens * k * H * 2));
  EXPECT_EQ(named(p, "xs_received").bytes, size_t(C * H * 2));
  EXPECT_EQ(named(p, "pre ").bytes, size_t(C * c.fc1_width() * 2));
  EXPECT_EQ(named(p, "dxs ").bytes, size_t(C * H * 2));
  EXPECT_EQ(named(p, "xs_received").region, LayerRegion::kCache);
  EXPECT_EQ(named(p, "ys_returned").region, LayerRegion::kCache);
}

TEST(EpLayerPlan, MostTokensCoverFewer) {
  for (auto name : preset_names()) {
    SCOPED_TRACE(std::string(name));
    const MoeConfig c = preset(name);
    const EpPlan ep = plan_of(c, 2, 2048);
    const EpLayerPlan most = make_ep_layer_plan(c, ep, 2048);
    for (int64_t T : {1, 7, 1000, 2047}) {
      const EpLayerPlan p = make_ep_layer_plan(c, ep, T);
      EXPECT_LE(p.cache_bytes, most.cache_bytes) << T;
      EXPECT_LE(p.workspace_bytes, most.workspace_bytes) << T;
    }
  }
}

}  // namespace
}  // namespace moefuse::dist
