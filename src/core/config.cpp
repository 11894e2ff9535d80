#include "moefuse/config.h"

#include <cmath>
#include <string>

#include "moefuse/error.h"

namespace moefuse {

std::string_view activation_name(Activation a) {
  switch (a) {
    case Activation::kSwiGLU: return "swiglu";
    case Activation::kGeGLU: return "geglu";
    case Activation::kReGLU: return "reglu";
    case Activation::kSquaredReLU: return "squared_relu";
    case Activation::kClampedSwiGLU: return "clamped_swiglu";
  }
  return "unknown";
}

std::string_view router_kind_name(RouterKind k) {
  return k == RouterKind::kSoftmaxTopK ? "softmax_topk" : "sigmoid_group_topk";
}

std::string_view precision_name(PrecisionRecipe p) {
  switch (p) {
    case PrecisionRecipe::kBF16: return "bf16";
    case PrecisionRecipe::kFP8Blockwise: return "fp8_blockwise";
    case PrecisionRecipe::kMXFP8: return "mxfp8";
  }
  return "unknown";
}

namespace {

void expect_positive(int64_t value, std::string_view name) {
  MOEFUSE_EXPECT(value > 0, name, "a positive value", std::to_string(value));
}

void expect_finite(float value, std::string_view name) {
  MOEFUSE_EXPECT(std::isfinite(value), name, "a finite value", std::to_string(value));
}

}  // namespace

void MoeConfig::validate() const {
  expect_positive(hidden, "config.hidden");
  expect_positive(ffn, "config.ffn");
  expect_positive(num_experts, "config.num_experts");
  expect_positive(top_k, "config.top_k");
  MOEFUSE_EXPECT(top_k <= num_experts, "config.top_k",
                 "top_k <= num_experts (" + std::to_string(num_experts) + ")",
                 std::to_string(top_k));
  MOEFUSE_EXPECT(shared_expert_ffn >= 0, "config.shared_expert_ffn", "0 (none) or a positive width",
                 std::to_string(shared_expert_ffn));
  if (activation == Activation::kClampedSwiGLU) {
    expect_finite(clamped_swiglu.alpha, "config.clamped_swiglu.alpha");
    MOEFUSE_EXPECT(clamped_swiglu.limit > 0 && std::isfinite(clamped_swiglu.limit),
                   "config.clamped_swiglu.limit", "a positive finite value",
                   std::to_string(clamped_swiglu.limit));
  }
  MOEFUSE_EXPECT(!bf16_wgrad || precision != PrecisionRecipe::kBF16, "config.bf16_wgrad",
                 "false with precision bf16 (it selects the wgrads' precision of an FP8 recipe)",
                 "true");
  expect_finite(router.routed_scaling_factor, "config.router.routed_scaling_factor");
  MOEFUSE_EXPECT(router.aux_loss_coeff >= 0 && std::isfinite(router.aux_loss_coeff),
                 "config.router.aux_loss_coeff", "a finite value >= 0",
                 std::to_string(router.aux_loss_coeff));
  MOEFUSE_EXPECT(router.z_loss_coeff >= 0 && std::isfinite(router.z_loss_coeff),
                 "config.router.z_loss_coeff", "a finite value >= 0",
                 std::to_string(router.z_loss_coeff));
  MOEFUSE_EXPECT(!router.use_score_bias || router.kind == RouterKind::kSigmoidGroupTopK,
                 "config.router.use_score_bias",
                 "false with the softmax router (the bias is a sigmoid-router feature)", "true");
  if (router.kind == RouterKind::kSigmoidGroupTopK) {
    expect_positive(router.num_groups, "config.router.num_groups");
    MOEFUSE_EXPECT(num_experts % router.num_groups == 0, "config.router.num_groups",
                   "a divisor of num_experts (" + std::to_string(num_experts) + ")",
                   std::to_string(router.num_groups));
    MOEFUSE_EXPECT(router.topk_groups >= 1 && router.topk_groups <= router.num_groups,
                   "config.router.topk_groups",
                   "1 <= topk_groups <= num_groups (" + std::to_string(router.num_groups) + ")",
                   std::to_string(router.topk_groups));
    const int64_t experts_reachable = router.topk_groups * (num_experts / router.num_groups);
    MOEFUSE_EXPECT(top_k <= experts_reachable, "config.top_k",
                   "top_k <= topk_groups * experts per group (" +
                       std::to_string(experts_reachable) + ")",
                   std::to_string(top_k));
    // The group score sums the two best experts of a group, so a group needs at least two.
    MOEFUSE_EXPECT(router.num_groups == 1 || num_experts / router.num_groups >= 2,
                   "config.router.num_groups", "at least 2 experts per group",
                   std::to_string(num_experts / router.num_groups) + " per group");
  }
}

MoeConfig shared_expert_config(const MoeConfig& config) {
  MoeConfig s = config;
  s.ffn = config.shared_expert_ffn;
  return s;
}

MoeConfig preset(std::string_view name) {
  MoeConfig c;
  if (name == "qwen3-30b-a3b") {
    c.hidden = 2048, c.ffn = 768, c.num_experts = 128, c.top_k = 8;
  } else if (name == "gpt-oss-120b") {
    c.hidden = 2880, c.ffn = 2880, c.num_experts = 128, c.top_k = 4;
    c.activation = Activation::kClampedSwiGLU;
    c.expert_bias = true;
  } else if (name == "mixtral-8x7b") {
    c.hidden = 4096, c.ffn = 14336, c.num_experts = 8, c.top_k = 2;
  } else if (name == "deepseek-v3") {
    // One rank's slice at 8-way expert parallelism: 32 of the 256 experts. Each token routes to
    // 8 of 256, about 1 of them local on average; the slice uses top-4 of 32 so that one GPU sees
    // the per-rank GEMM work of a balanced step (shared/ANCHORS.md measures the same shape).
    c.hidden = 7168, c.ffn = 2048, c.num_experts = 32, c.top_k = 4;
    c.shared_expert_ffn = 2048;
    c.router.kind = RouterKind::kSigmoidGroupTopK;
    c.router.num_groups = 8;
    c.router.topk_groups = 4;
    c.router.use_score_bias = true;
    c.router.routed_scaling_factor = 2.5f;
  } else {
    std::string known;
    for (auto n : preset_names()) known += (known.empty() ? "" : ", ") + std::string(n);
    throw InvalidArgument("preset", "one of " + known, "'" + std::string(name) + "'");
  }
  return c;
}

std::vector<std::string_view> preset_names() {
  return {"qwen3-30b-a3b", "gpt-oss-120b", "mixtral-8x7b", "deepseek-v3"};
}

}  // namespace moefuse
