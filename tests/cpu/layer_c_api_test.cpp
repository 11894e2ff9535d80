// The layer's C twin (moefuse.h) without a GPU: sizes, and every failure becoming a status plus
// a message that names the argument.
#include <gtest/gtest.h>

#include <string>

#include "core/c_api_views.h"
#include "moefuse/error.h"
#include "moefuse/layer.h"
#include "moefuse/moefuse.h"

namespace {

moefuse_config_t qwen3() {
  moefuse_config_t c{};
  EXPECT_EQ(moefuse_config_preset("qwen3-30b-a3b", &c), MOEFUSE_STATUS_OK);
  return c;
}

void expect_invalid(moefuse_status_t status, const std::string& argument) {
  EXPECT_EQ(status, MOEFUSE_STATUS_INVALID_ARGUMENT);
  EXPECT_NE(std::string(moefuse_last_error()).find("'" + argument + "'"), std::string::npos)
      << moefuse_last_error();
}

TEST(LayerCApi, SizesAreTheMemoryPlans) {
  const moefuse_config_t c = qwen3();
  for (int recompute : {0, 1}) {
    size_t cache = 0, workspace = 0;
    ASSERT_EQ(moefuse_layer_sizes(&c, MOEFUSE_LAYER_UNFUSED, recompute, 4096, &cache, &workspace),
              MOEFUSE_STATUS_OK)
        << moefuse_last_error();
    const moefuse::LayerMemoryPlan p = moefuse::layer_memory_plan(
        moefuse::preset("qwen3-30b-a3b"),
        {.mode = moefuse::LayerMode::kUnfused, .recompute_pre = recompute != 0}, 4096);
    EXPECT_EQ(cache, p.cache_bytes);
    EXPECT_EQ(workspace, p.workspace_bytes);
  }
}

TEST(LayerCApi, BadArgumentsReturnInvalidArgumentNamingThem) {
  moefuse_config_t c = qwen3();
  size_t a = 0, b = 0;
  expect_invalid(moefuse_layer_sizes(nullptr, MOEFUSE_LAYER_FUSED, 0, 16, &a, &b), "config");
  expect_invalid(moefuse_layer_sizes(&c, static_cast<moefuse_layer_mode_t>(7), 0, 16, &a, &b),
                 "mode");
  expect_invalid(moefuse_layer_sizes(&c, MOEFUSE_LAYER_FUSED, 0, 0, &a, &b), "tokens");
  expect_invalid(moefuse_layer_sizes(&c, MOEFUSE_LAYER_FUSED, 0, 16, nullptr, &b), "cache_bytes");
  moefuse_layer_t* layer = reinterpret_cast<moefuse_layer_t*>(&c);  // must be reset on failure
  c.precision = static_cast<moefuse_precision_t>(7);
  expect_invalid(moefuse_layer_create(&c, MOEFUSE_LAYER_FUSED, 0, &layer), "config.precision");
  EXPECT_EQ(layer, nullptr);
  c = qwen3();
  c.precision = MOEFUSE_PRECISION_MXFP8;
  c.hidden = 2064;  // MXFP8's 32-element blocks
  expect_invalid(moefuse_layer_create(&c, MOEFUSE_LAYER_FUSED, 0, &layer), "config.hidden");
  EXPECT_EQ(layer, nullptr);
  c = qwen3();
  c.hidden = 2044;
  expect_invalid(moefuse_layer_create(&c, MOEFUSE_LAYER_FUSED, 0, &layer), "config.hidden");
  const moefuse_layer_weights_t w{};
  expect_invalid(moefuse_layer_forward(nullptr, 16, nullptr, &w, nullptr, nullptr, nullptr, 0,
                                       nullptr, 0, nullptr),
                 "layer");
  const moefuse_layer_grads_t g{};
  expect_invalid(moefuse_layer_backward(nullptr, 16, nullptr, nullptr, &w, &g, nullptr, 0, nullptr,
                                        0, nullptr),
                 "layer");
  EXPECT_EQ(moefuse_layer_destroy(nullptr), MOEFUSE_STATUS_OK);
}

// bf16_wgrad crosses the C struct: refused by name with bf16 precision, and with FP8 the sizes
// are the plan with bf16 wgrads (bf16 dys and xs instead of the column-wise FP8 operands).
TEST(LayerCApi, Bf16WgradReachesTheConfig) {
  moefuse_config_t c = qwen3();
  c.bf16_wgrad = 1;
  expect_invalid(moefuse_config_validate(&c), "config.bf16_wgrad");
  c.precision = MOEFUSE_PRECISION_FP8_BLOCKWISE;
  EXPECT_EQ(moefuse_config_validate(&c), MOEFUSE_STATUS_OK) << moefuse_last_error();
  size_t cache = 0, workspace = 0;
  ASSERT_EQ(moefuse_layer_sizes(&c, MOEFUSE_LAYER_FUSED, 0, 4096, &cache, &workspace),
            MOEFUSE_STATUS_OK)
      << moefuse_last_error();
  moefuse::MoeConfig m = moefuse::preset("qwen3-30b-a3b");
  m.precision = moefuse::PrecisionRecipe::kFP8Blockwise;
  m.bf16_wgrad = true;
  EXPECT_EQ(workspace, moefuse::layer_memory_plan(m, {}, 4096).workspace_bytes);
  m.bf16_wgrad = false;
  EXPECT_NE(workspace, moefuse::layer_memory_plan(m, {}, 4096).workspace_bytes);
}

// The gradients struct's dtype field becomes the expert gradients' dtype; a value outside the
// enum is named (moefuse_layer_backward reaches this check only with a layer, which needs a GPU).
TEST(LayerCApi, ExpertGradsDtypeIsCheckedByName) {
  const moefuse::MoeConfig c = moefuse::preset("qwen3-30b-a3b");
  float d_w1 = 0, d_w2 = 0;  // never dereferenced: the views only carry the pointers
  moefuse_layer_grads_t g{};
  g.d_w1 = &d_w1;
  g.d_w2 = &d_w2;
  g.expert_grads = MOEFUSE_EXPERT_GRADS_BF16;
  const moefuse::MoeLayerGrads views = moefuse::capi::grads_of(c, 16, g);
  EXPECT_EQ(views.d_w1.dtype, moefuse::DType::kBFloat16);
  EXPECT_EQ(views.d_w2.dtype, moefuse::DType::kBFloat16);
  g.expert_grads = MOEFUSE_EXPERT_GRADS_FP32;
  EXPECT_EQ(moefuse::capi::grads_of(c, 16, g).d_w1.dtype, moefuse::DType::kFloat32);
  g.expert_grads = static_cast<moefuse_expert_grads_t>(7);
  try {
    moefuse::capi::grads_of(c, 16, g);
    FAIL() << "accepted expert_grads 7";
  } catch (const moefuse::InvalidArgument& e) {
    EXPECT_EQ(e.argument(), "grads.expert_grads") << e.what();
  }
}

}  // namespace
