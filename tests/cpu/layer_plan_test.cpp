// The layer's memory plan (host arithmetic, no GPU): buffers never overlap where they are live
// together, the cache holds only the routing metadata and the pre-activations, recompute drops
// exactly the pre-activations, and sizes grow with T.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "cuda/layer/plan.h"
#include "moefuse/error.h"
#include "moefuse/layer.h"
#include "layer_plan_helpers.h"
#include "ref_test_helpers.h"

namespace moefuse {
namespace {

using test::align256;

struct Variant {
  std::string preset;
  LayerOptions options;
  bool fp8 = false;  // the FP8 forward (fused only, no expert bias)

  MoeConfig config() const {
    MoeConfig c = preset_of(preset);
    if (fp8) c.precision = PrecisionRecipe::kFP8Blockwise, c.expert_bias = false;
    return c;
  }
  static MoeConfig preset_of(const std::string& name) { return moefuse::preset(name); }
};

std::vector<Variant> variants() {
  std::vector<Variant> out;
  for (auto name : preset_names()) {
    for (LayerMode mode : {LayerMode::kFused, LayerMode::kUnfused})
      for (bool recompute : {false, true})
        out.push_back({std::string(name), {.mode = mode, .recompute_pre = recompute}});
    for (bool recompute : {false, true})  // FP8: fused only
      out.push_back({std::string(name), {.mode = LayerMode::kFused, .recompute_pre = recompute},
                     true});
  }
  return out;
}

bool overlap(const LayerBuffer& a, const LayerBuffer& b) {
  return a.offset < b.offset + b.bytes && b.offset < a.offset + a.bytes;
}

// Pairwise disjoint among the buffers whose region is in `regions`.
void expect_disjoint(const LayerMemoryPlan& p, std::initializer_list<LayerRegion> regions,
                     const std::string& what) {
  std::vector<const LayerBuffer*> live;
  for (const auto& b : p.buffers)
    if (std::find(regions.begin(), regions.end(), b.region) != regions.end()) live.push_back(&b);
  for (size_t i = 0; i < live.size(); ++i)
    for (size_t j = i + 1; j < live.size(); ++j)
      EXPECT_FALSE(overlap(*live[i], *live[j]))
          << what << ": '" << live[i]->name << "' overlaps '" << live[j]->name << "'";
}

TEST(LayerPlan, BuffersAreAlignedInBoundsAndDisjointWhileLive) {
  for (const Variant& v : variants()) {
    SCOPED_TRACE(v.preset + " " + std::string(layer_mode_name(v.options.mode)) +
                 (v.options.recompute_pre ? " recompute" : " cached") + (v.fp8 ? " fp8" : ""));
    for (int64_t T : {1, 333, 16384}) {
      const LayerMemoryPlan p = layer_memory_plan(v.config(), v.options, T);
      for (const auto& b : p.buffers) {
        EXPECT_EQ(b.offset % 256, 0u) << b.name;
        EXPECT_GT(b.bytes, 0u) << b.name;
        const size_t limit = b.region == LayerRegion::kCache         ? p.cache_bytes
                             : b.region == LayerRegion::kFp8Weights ? p.fp8_weight_bytes
                                                                    : p.workspace_bytes;
        EXPECT_LE(b.offset + b.bytes, limit) << b.name;
      }
      expect_disjoint(p, {LayerRegion::kCache}, "cache");
      expect_disjoint(p, {LayerRegion::kFp8Weights}, "fp8 weights");
      expect_disjoint(p, {LayerRegion::kWorkspaceBoth, LayerRegion::kWorkspaceForward},
                      "forward");
      expect_disjoint(p, {LayerRegion::kWorkspaceBoth, LayerRegion::kWorkspaceBackward},
                      "backward");
    }
  }
}

// The cache: x is the caller's, never copied; the permuted x, FC2's output and dY never cached.
TEST(LayerPlan, CacheHoldsRoutingMetadataAndPreActivationOnly) {
  for (const Variant& v : variants()) {
    const MoeConfig c = v.config();
    SCOPED_TRACE(v.preset + (v.fp8 ? " fp8" : ""));
    const size_t T = 4096, E = c.num_experts, k = c.top_k;
    MoeConfig sc = c;
    sc.ffn = c.shared_expert_ffn;
    const LayerMemoryPlan p = layer_memory_plan(c, v.options, T);
    // logits [T,E] fp32; idx, probs, row_of, token_of_row, row_prob: 4 bytes per assignment;
    // counts, offsets, the shared expert's offsets.
    size_t metadata = align256(T * E * 4) + 5 * align256(T * k * 4) + align256(E * 4) +
                      align256((E + 1) * 4) + (c.shared_expert_ffn > 0 ? 256 : 0);
    size_t pre = 0;
    if (!v.options.recompute_pre) {  // either precision: the FP8 FC1 writes pre too
      pre = align256(T * k * c.fc1_width() * 2);
      if (c.shared_expert_ffn > 0) pre += align256(T * sc.fc1_width() * 2);
    }
    EXPECT_EQ(p.cache_bytes, metadata + pre);
    for (const auto& b : p.buffers) {
      if (b.region != LayerRegion::kCache) continue;
      for (const char* never : {"xs", "ys", "dys", "act", "x ["})
        EXPECT_EQ(b.name.rfind(never, 0), std::string::npos) << b.name << " is cached";
    }
  }
}

// The bf16 forward's permuted x: absent exactly where FC1 gathers x rows itself (fused bf16,
// fc1 width <= layer::kGatherMaxFc1Width: qwen3 and the deepseek slice), present for the wide FC1s
// and in unfused mode; the FP8 forward permutes into e4m3 codes instead.
TEST(LayerPlan, ForwardPermutedXOnlyWhereFc1DoesNotGather) {
  for (const Variant& v : variants()) {
    const MoeConfig c = v.config();
    SCOPED_TRACE(v.preset + " " + std::string(layer_mode_name(v.options.mode)) +
                 (v.fp8 ? " fp8" : ""));
    const bool gathers = v.options.mode == LayerMode::kFused && !v.fp8 &&
                         c.fc1_width() <= layer::kGatherMaxFc1Width;
    EXPECT_EQ(layer::fc1_gathers_x(c, v.options), gathers);
    const LayerMemoryPlan p = layer_memory_plan(c, v.options, 333);
    const bool has_xs = std::any_of(p.buffers.begin(), p.buffers.end(), [](const LayerBuffer& b) {
      return b.region == LayerRegion::kWorkspaceForward && b.name.rfind("xs [R,H] bf16", 0) == 0;
    });
    EXPECT_EQ(has_xs, !gathers && !v.fp8);
  }
  // The rule picks the narrow presets.
  const LayerOptions fused{.mode = LayerMode::kFused};
  EXPECT_TRUE(layer::fc1_gathers_x(preset("qwen3-30b-a3b"), fused));
  EXPECT_TRUE(layer::fc1_gathers_x(preset("deepseek-v3"), fused));
  EXPECT_FALSE(layer::fc1_gathers_x(preset("gpt-oss-120b"), fused));
  EXPECT_FALSE(layer::fc1_gathers_x(preset("mixtral-8x7b"), fused));
}

TEST(LayerPlan, SizesGrowWithTokens) {
  for (const Variant& v : variants()) {
    const MoeConfig c = v.config();
    size_t last_cache = 0, last_ws = 0;
    for (int64_t T : {1, 64, 1000, 16384}) {
      const LayerMemoryPlan p = layer_memory_plan(c, v.options, T);
      EXPECT_GE(p.cache_bytes, last_cache);
      EXPECT_GE(p.workspace_bytes, last_ws);
      last_cache = p.cache_bytes, last_ws = p.workspace_bytes;
    }
  }
}

TEST(LayerPlan, RejectsBadConfigAndTokenCount) {
  MoeConfig c = preset("qwen3-30b-a3b");
  test::expect_invalid([&] { layer_memory_plan(c, {}, 0); }, "tokens");
  c.precision = static_cast<PrecisionRecipe>(7);
  test::expect_invalid([&] { layer_memory_plan(c, {}, 16); }, "config.precision");
}

}  // namespace
}  // namespace moefuse
