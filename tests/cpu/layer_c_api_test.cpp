// The layer's C twin (moefuse.h) without a GPU: sizes, and every failure becoming a status plus
// a message that names the argument.
#include <gtest/gtest.h>

#include <string>

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
  c.precision = MOEFUSE_PRECISION_MXFP8;
  expect_invalid(moefuse_layer_create(&c, MOEFUSE_LAYER_FUSED, 0, &layer), "config.precision");
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

}  // namespace
