#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "common/test_util.h"
#include "moefuse/config.h"
#include "moefuse/error.h"
#include "moefuse/moefuse.h"

namespace moefuse {
namespace {

MoeConfig small() {
  MoeConfig c;
  c.hidden = 64, c.ffn = 32, c.num_experts = 8, c.top_k = 2;
  return c;
}

void expect_rejects(const MoeConfig& c, const std::string& argument) {
  test::expect_invalid([&] { c.validate(); }, argument);
}

TEST(MoeConfig, EveryPresetIsValid) {
  for (auto name : preset_names()) EXPECT_NO_THROW(preset(name).validate()) << name;
  EXPECT_EQ(preset("qwen3-30b-a3b").fc1_width(), 2 * 768);
  EXPECT_EQ(preset("gpt-oss-120b").activation, Activation::kClampedSwiGLU);
  EXPECT_EQ(preset("deepseek-v3").router.kind, RouterKind::kSigmoidGroupTopK);
}

TEST(MoeConfig, UnknownPresetListsTheKnownOnes) {
  try {
    preset("llama");
    FAIL();
  } catch (const InvalidArgument& e) {
    EXPECT_EQ(e.argument(), "preset");
    EXPECT_NE(e.expected().find("mixtral-8x7b"), std::string::npos);
  }
}

TEST(MoeConfig, RejectsEachBadField) {
  auto c = small();
  c.hidden = 0;
  expect_rejects(c, "config.hidden");
  c = small(), c.ffn = -3;
  expect_rejects(c, "config.ffn");
  c = small(), c.num_experts = 0;
  expect_rejects(c, "config.num_experts");
  c = small(), c.top_k = 0;
  expect_rejects(c, "config.top_k");
  c = small(), c.top_k = 9;
  expect_rejects(c, "config.top_k");
  c = small(), c.shared_expert_ffn = -1;
  expect_rejects(c, "config.shared_expert_ffn");
  c = small(), c.activation = Activation::kClampedSwiGLU, c.clamped_swiglu.limit = 0;
  expect_rejects(c, "config.clamped_swiglu.limit");
  c = small(), c.router.routed_scaling_factor = INFINITY;
  expect_rejects(c, "config.router.routed_scaling_factor");
  c = small(), c.router.aux_loss_coeff = -1;
  expect_rejects(c, "config.router.aux_loss_coeff");
  c = small(), c.router.z_loss_coeff = NAN;
  expect_rejects(c, "config.router.z_loss_coeff");
  c = small(), c.router.use_score_bias = true;  // softmax router has no score bias
  expect_rejects(c, "config.router.use_score_bias");
  c = small(), c.bf16_wgrad = true;  // a bf16 layer's wgrads are bf16 already
  expect_rejects(c, "config.bf16_wgrad");
  c.precision = PrecisionRecipe::kFP8Blockwise;
  EXPECT_NO_THROW(c.validate());
}

TEST(MoeConfig, RejectsBadGroupRouting) {
  auto c = small();
  c.router.kind = RouterKind::kSigmoidGroupTopK;
  c.router.num_groups = 3;  // 8 experts do not split into 3 groups
  expect_rejects(c, "config.router.num_groups");
  c.router.num_groups = 4, c.router.topk_groups = 5;
  expect_rejects(c, "config.router.topk_groups");
  c.router.topk_groups = 1, c.top_k = 3;  // one group of 2 experts cannot supply 3
  expect_rejects(c, "config.top_k");
  c.router.num_groups = 8, c.router.topk_groups = 2, c.top_k = 2;  // groups of one expert
  expect_rejects(c, "config.router.num_groups");
}

TEST(CApi, PresetValidateAndLastError) {
  moefuse_config_t c;
  ASSERT_EQ(moefuse_config_preset("mixtral-8x7b", &c), MOEFUSE_STATUS_OK);
  EXPECT_EQ(c.hidden, 4096);
  EXPECT_EQ(moefuse_config_validate(&c), MOEFUSE_STATUS_OK);
  c.top_k = 99;
  EXPECT_EQ(moefuse_config_validate(&c), MOEFUSE_STATUS_INVALID_ARGUMENT);
  EXPECT_NE(std::strstr(moefuse_last_error(), "config.top_k"), nullptr) << moefuse_last_error();
  EXPECT_EQ(moefuse_config_preset("nope", &c), MOEFUSE_STATUS_INVALID_ARGUMENT);
  EXPECT_NE(std::strstr(moefuse_last_error(), "preset"), nullptr);
  EXPECT_EQ(moefuse_config_preset("mixtral-8x7b", nullptr), MOEFUSE_STATUS_INVALID_ARGUMENT);
  EXPECT_EQ(moefuse_config_validate(nullptr), MOEFUSE_STATUS_INVALID_ARGUMENT);
  c.activation = static_cast<moefuse_activation_t>(17);
  EXPECT_EQ(moefuse_config_validate(&c), MOEFUSE_STATUS_INVALID_ARGUMENT);
  EXPECT_NE(std::strstr(moefuse_last_error(), "config.activation"), nullptr);
}

}  // namespace
}  // namespace moefuse
