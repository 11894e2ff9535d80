// The MXFP8 layer on the host (no GPU): its memory plan against formulas written out here — the
// weight region's four quantise-dequantised bf16 copies, the forward's x_qdq, the backward's
// row-wise dgrad operands (and the recompute's x rows) — and that it is the bf16 plan otherwise.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <string>

#include "moefuse/layer.h"
#include "layer_plan_helpers.h"
#include "ref_test_helpers.h"

namespace moefuse {
namespace {

using test::align256;
using test::find_buffer;

MoeConfig mxfp8(MoeConfig c) {
  c.precision = PrecisionRecipe::kMXFP8;
  return c;
}

// w1 and w2 twice each (along the forward's K, along the dgrads'), bf16, whatever T.
TEST(LayerMxfp8Plan, WeightRegionHoldsFourBf16Copies) {
  for (auto name : preset_names()) {
    SCOPED_TRACE(std::string(name));
    const MoeConfig c = mxfp8(preset(name));
    const size_t E = c.num_experts, H = c.hidden, F = c.ffn, fc1 = c.fc1_width();
    const size_t want = 2 * (align256(E * fc1 * H * 2) + align256(E * H * F * 2));
    EXPECT_EQ(layer_memory_plan(c, {}, 4096).fp8_weight_bytes, want);
    EXPECT_EQ(layer_memory_plan(c, {}, 1).fp8_weight_bytes, want) << "independent of T";
    for (const char* prefix : {"w1_qdq [", "w2_qdq [", "w1_qdq_dgrad", "w2_qdq_dgrad"}) {
      const LayerBuffer* b = find_buffer(layer_memory_plan(c, {}, 1), prefix);
      ASSERT_NE(b, nullptr) << prefix;
      EXPECT_EQ(b->region, LayerRegion::kFp8Weights) << prefix;
      EXPECT_EQ(b->offset % 256, 0u) << prefix;
    }
  }
}

// Every buffer of the bf16 plan is there, at its size, but the bf16 FC2 dgrad's b2 dots (its d_b2
// pass reads bf16 dys; MXFP8 sums d_b2 apart); the additions are x_qdq [T, H] (forward), dys_qdq
// [R, H] and d_pre_qdq [R, fc1] (backward), and with recompute_pre xs_qdq [R, H].
TEST(LayerMxfp8Plan, ScratchIsTheBf16PlansPlusTheQdqOperands) {
  for (auto name : preset_names()) {
    for (bool recompute : {false, true}) {
      SCOPED_TRACE(std::string(name) + (recompute ? " recompute_pre" : " cached pre"));
      const MoeConfig c = mxfp8(preset(name));
      const int64_t T = 333;
      const size_t R = T * c.top_k, H = c.hidden, fc1 = c.fc1_width();
      const LayerOptions o{.recompute_pre = recompute};
      const LayerMemoryPlan bf = layer_memory_plan(preset(name), o, T);
      const LayerMemoryPlan mx = layer_memory_plan(c, o, T);
      EXPECT_EQ(mx.cache_bytes, bf.cache_bytes);
      const bool bias_dots = find_buffer(bf, "bias_partial") != nullptr;
      EXPECT_EQ(bias_dots, c.expert_bias);
      EXPECT_EQ(find_buffer(mx, "bias_partial"), nullptr);
      for (const auto& b : bf.buffers) {  // names repeat across regions (shared_act)
        if (b.name.starts_with("bias_partial")) continue;
        const auto same = [&](const LayerBuffer& m) {
          return m.name == b.name && m.region == b.region && m.bytes == b.bytes;
        };
        EXPECT_TRUE(std::any_of(mx.buffers.begin(), mx.buffers.end(), same)) << b.name;
      }
      struct Want {
        const char* prefix;
        LayerRegion region;
        size_t bytes;
      };
      for (const Want& w : {Want{"x_qdq [T,H]", LayerRegion::kWorkspaceForward, T * H * 2},
                            Want{"dys_qdq [R,H]", LayerRegion::kWorkspaceBackward, R * H * 2},
                            Want{"d_pre_qdq", LayerRegion::kWorkspaceBackward, R * fc1 * 2}}) {
        const LayerBuffer* b = find_buffer(mx, w.prefix);
        ASSERT_NE(b, nullptr) << w.prefix;
        EXPECT_EQ(b->region, w.region) << w.prefix;
        EXPECT_EQ(b->bytes, w.bytes) << w.prefix;
        EXPECT_LE(b->offset + b->bytes, mx.workspace_bytes) << w.prefix;
      }
      const LayerBuffer* xs_qdq = find_buffer(mx, "xs_qdq");
      EXPECT_EQ(xs_qdq != nullptr, recompute) << "the recompute's quantised x rows";
      if (xs_qdq) EXPECT_EQ(xs_qdq->bytes, R * H * 2);
      EXPECT_EQ(mx.buffers.size(), bf.buffers.size() - bias_dots + 3 + (recompute ? 1 : 0) + 4)
          << "no buffer beyond the three (four) above and the weight region's four";
    }
  }
}

}  // namespace
}  // namespace moefuse
