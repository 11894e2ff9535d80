// The configuration of one MoE layer: shapes, activation, router and precision.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

namespace moefuse {

// Expert activation. The GLU kinds use an FC1 of width 2F (gate and up halves); kSquaredReLU
// uses width F. Reference layout of a GLU FC1 weight is [gate; up] along the 2F rows; the GPU
// kernels use an interleaved layout (see the grouped GEMM docs) with a conversion helper.
enum class Activation : uint8_t {
  kSwiGLU,         // silu(gate) * up
  kGeGLU,          // gelu_erf(gate) * up
  kReGLU,          // relu(gate) * up
  kSquaredReLU,    // relu(h)^2, no gate
  kClampedSwiGLU,  // GPT-OSS: g = min(gate, limit), u = clamp(up, -limit, limit),
                   //          g * sigmoid(alpha * g) * (u + 1)
};

constexpr bool is_glu(Activation a) { return a != Activation::kSquaredReLU; }
std::string_view activation_name(Activation a);

struct ClampedSwiGLUParams {
  float alpha = 1.702f;
  float limit = 7.0f;
};

enum class RouterKind : uint8_t {
  // p = softmax(logits); top-k of p; optionally renormalised over the chosen k (Mixtral, Qwen).
  kSoftmaxTopK,
  // s = sigmoid(logits); selection on s + score_bias restricted to the best `topk_groups` of
  // `num_groups` expert groups (group score = sum of its two best biased scores); weights are the
  // unbiased s of the chosen experts, optionally renormalised (DeepSeek-V3).
  kSigmoidGroupTopK,
};
std::string_view router_kind_name(RouterKind k);

struct RouterOptions {
  RouterKind kind = RouterKind::kSoftmaxTopK;
  bool renormalize = true;             // divide the k weights by their sum
  float routed_scaling_factor = 1.0f;  // applied to the final weights
  int num_groups = 1;                  // kSigmoidGroupTopK only
  int topk_groups = 1;                 // kSigmoidGroupTopK only
  bool use_score_bias = false;         // kSigmoidGroupTopK: selection-only bias [E]
  float aux_loss_coeff = 0.0f;         // alpha in alpha * E * sum_i f_i * P_i
  float z_loss_coeff = 0.0f;           // beta in beta * mean_t logsumexp(logits_t)^2
};

enum class PrecisionRecipe : uint8_t {
  kBF16,          // bf16 operands, fp32 accumulation
  kFP8Blockwise,  // DeepSeek-V3: E4M3, 1x128 activation groups, 128x128 weight blocks, fp32 scales
  kMXFP8,         // E4M3, 32-element blocks, UE8M0 scales
};
std::string_view precision_name(PrecisionRecipe p);

struct MoeConfig {
  int64_t hidden = 0;       // H
  int64_t ffn = 0;          // F, per expert
  int64_t num_experts = 0;  // E
  int64_t top_k = 0;        // k
  Activation activation = Activation::kSwiGLU;
  ClampedSwiGLUParams clamped_swiglu{};
  bool expert_bias = false;     // b1 [E, fc1_width], b2 [E, H]
  int64_t shared_expert_ffn = 0;  // 0: no shared expert; else its F (same activation, no bias)
  RouterOptions router{};
  PrecisionRecipe precision = PrecisionRecipe::kBF16;
  // FP8 precisions only: the two weight-gradient GEMMs (dW1, dW2) take bf16 operands instead of
  // column-wise FP8 ones; forward and dgrads stay FP8 (Transformer Engine's
  // override_linear_precision for wgrad). With narrow experts (qwen3: H 2048, F 768) the FP8
  // wgrads gain less than their column-wise quantisations cost (docs/fp8.md, session 24).
  bool bf16_wgrad = false;

  int64_t fc1_width() const { return is_glu(activation) ? 2 * ffn : ffn; }

  // Throws InvalidArgument naming the first field that is out of range.
  void validate() const;
};

// The shared expert's config: the layer's, with its own F (same activation; it has no bias).
MoeConfig shared_expert_config(const MoeConfig& config);

// The model shapes users train (shared/DESIGN.md). Names: qwen3-30b-a3b, gpt-oss-120b,
// mixtral-8x7b, deepseek-v3 (the 32-expert slice one rank sees at 8-way expert parallelism).
MoeConfig preset(std::string_view name);
std::vector<std::string_view> preset_names();

}  // namespace moefuse
