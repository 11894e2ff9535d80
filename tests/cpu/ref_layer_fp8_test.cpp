// The CPU reference of the FP8 forward and backward (src/ref/layer_fp8.h): its distance from the
// bf16 reference is the recipe's quantisation error, measured here on Gaussian data (larger error
// than the GPU test's grid-valued x) for every preset's kind of layer at test size, for y and for
// every gradient; the GPU test uses the bounds these measurements justify
// (ref/layer_fp8_tolerance.h).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "common/test_util.h"
#include "moefuse/error.h"
#include "ref/layer.h"
#include "ref/layer_fp8.h"
#include "ref/layer_fp8_tolerance.h"
#include "ref_layer_data.h"
#include "ref_test_helpers.h"

namespace moefuse {
namespace {

using test::bf16_normal;
using Data = test::RefLayerData;
using Grads = test::RefLayerGrads;

MoeConfig small_fp8(const std::string& name) {
  return test::small_layer(name, PrecisionRecipe::kFP8Blockwise);
}

TEST(RefLayerFp8, QuantisationErrorIsWithinTheDocumentedBound) {
  for (const char* name : {"qwen3-30b-a3b", "gpt-oss-120b", "mixtral-8x7b", "deepseek-v3"}) {
    SCOPED_TRACE(name);
    Data d(small_fp8(name), 96);
    const ref::LayerWeights w = d.weights();
    const ref::LayerForward bf16 = ref::layer_forward(d.c, w, d.xv());
    const std::vector<float> y = ref::layer_forward_fp8(d.c, w, d.xv(), bf16);
    ASSERT_EQ(y.size(), bf16.y.size());
    const double err = test::rel_norm_error(y, bf16.y);
    std::printf("[ fp8 ] %-14s y rel-norm error vs bf16 reference: %.4f (bound %.3f)\n", name,
                err, ref::kFp8LayerForwardTolerance);
    EXPECT_LE(err, ref::kFp8LayerForwardTolerance);
    EXPECT_GE(err, 1e-3) << "the operands should have been quantised";
  }
}

// The biases reach the FP8 epilogues: with them the FP8 y tracks the biased bf16 reference, and
// dropping them moves it far past the quantisation error.
TEST(RefLayerFp8, ExpertBiasEntersTheEpilogues) {
  for (const char* name : {"qwen3-30b-a3b", "gpt-oss-120b"}) {
    SCOPED_TRACE(name);
    MoeConfig c = small_fp8(name);
    c.expert_bias = true;
    Data d(c, 64);
    const ref::LayerForward f = ref::layer_forward(c, d.weights(), d.xv());
    EXPECT_LE(test::rel_norm_error(ref::layer_forward_fp8(c, d.weights(), d.xv(), f), f.y),
              ref::kFp8LayerForwardTolerance);
    std::fill(d.b1.begin(), d.b1.end(), 0.0f);
    std::fill(d.b2.begin(), d.b2.end(), 0.0f);
    EXPECT_GT(test::rel_norm_error(ref::layer_forward_fp8(c, d.weights(), d.xv(), f), f.y),
              2 * ref::kFp8LayerForwardTolerance);
  }
}

// Every gradient of ref::layer_backward_fp8 against ref::layer_backward on the same inputs and
// routing: the measured errors are the table in ref/layer_fp8_tolerance.h.
TEST(RefLayerFp8, BackwardQuantisationErrorIsWithinTheDocumentedBounds) {
  std::vector<std::pair<std::string, MoeConfig>> configs;
  for (const char* name : {"qwen3-30b-a3b", "gpt-oss-120b", "mixtral-8x7b", "deepseek-v3"})
    configs.push_back({name, small_fp8(name)});
  // The GPU test's other activations: squared ReLU doubles act's relative error.
  for (Activation a : {Activation::kGeGLU, Activation::kSquaredReLU}) {
    configs.push_back({std::string(activation_name(a)), small_fp8("qwen3-30b-a3b")});
    configs.back().second.activation = a;
  }
  for (const auto& [label, config] : configs) {
    const char* name = label.c_str();
    SCOPED_TRACE(name);
    Data d(config, 96);
    const MoeConfig& c = d.c;
    std::vector<float> dy = bf16_normal(d.T * c.hidden, 1.0f);
    const ref::LayerWeights w = d.weights();
    const ref::LayerForward fwd = ref::layer_forward(c, w, d.xv());
    Grads bf16(c, d.T), fp8(c, d.T);
    const TensorView dyv = TensorView::contiguous(dy.data(), DType::kFloat32, {d.T, c.hidden});
    ref::layer_backward(c, w, d.xv(), fwd, dyv, bf16.views);
    ref::layer_backward_fp8(c, w, d.xv(), fwd, dyv, fp8.views);
    for (const auto& [grad, pair] : fp8.paired_with(bf16)) {
      if (pair.first->empty()) continue;
      const double err = test::rel_norm_error(*pair.first, *pair.second);
      const double tol = ref::fp8_layer_gradient_tolerance(grad);
      std::printf("[ fp8 ] %-14s %-12s rel-norm error vs bf16 reference: %.4f (bound %.3f)\n",
                  name, grad.c_str(), err, tol);
      EXPECT_LE(err, tol) << grad;
      // Every GEMM operand went through e4m3, the shared expert's too; d_b2 sums bf16 dys.
      if (grad != "d_b2") EXPECT_GE(err, 1e-3) << grad << " not quantised?";
    }
  }
}

// config.bf16_wgrad changes the weight gradients only (d_w1, d_w2 and the shared expert's; every
// other gradient bit for bit), and brings
// them closer to the bf16 reference: two e4m3 roundings of their operands fewer.
TEST(RefLayerFp8, Bf16WgradsChangeOnlyTheWeightGradients) {
  for (const char* name : {"qwen3-30b-a3b", "gpt-oss-120b", "deepseek-v3"}) {
    SCOPED_TRACE(name);
    Data d(small_fp8(name), 96);
    MoeConfig c = d.c, c16 = d.c;
    c16.bf16_wgrad = true;
    std::vector<float> dy = bf16_normal(d.T * c.hidden, 1.0f);
    const ref::LayerWeights w = d.weights();
    const ref::LayerForward fwd = ref::layer_forward(c, w, d.xv());
    Grads bf16(c, d.T), fp8(c, d.T), fp8_bf16_wgrad(c, d.T);
    const TensorView dyv = TensorView::contiguous(dy.data(), DType::kFloat32, {d.T, c.hidden});
    ref::layer_backward(c, w, d.xv(), fwd, dyv, bf16.views);
    ref::layer_backward_fp8(c, w, d.xv(), fwd, dyv, fp8.views);
    ref::layer_backward_fp8(c16, w, d.xv(), fwd, dyv, fp8_bf16_wgrad.views);
    const auto vs_fp8 = fp8_bf16_wgrad.paired_with(fp8);
    const auto vs_bf16 = fp8_bf16_wgrad.paired_with(bf16);  // the same order
    for (size_t i = 0; i < vs_fp8.size(); ++i) {
      const auto& [grad, pair] = vs_fp8[i];
      if (pair.first->empty()) continue;  // no shared expert
      const bool weight_grad = grad == "d_w1" || grad == "d_w2" || grad == "d_shared_w1" ||
                               grad == "d_shared_w2";  // the shared expert's wgrads follow too
      if (!weight_grad) {
        EXPECT_EQ(*pair.first, *pair.second) << grad << " should not depend on the wgrads";
        continue;
      }
      const std::vector<float>& want = *vs_bf16[i].second.second;
      const double err16 = test::rel_norm_error(*pair.first, want);
      const double err8 = test::rel_norm_error(*pair.second, want);
      std::printf("[ fp8 ] %-14s %-11s rel-norm error vs bf16 reference: %.4f with bf16 wgrads, "
                  "%.4f with FP8 ones\n", name, grad.c_str(), err16, err8);
      EXPECT_LT(err16, err8) << grad;
      EXPECT_LE(err16, ref::fp8_layer_gradient_tolerance(grad)) << grad;
    }
  }
}

}  // namespace
}  // namespace moefuse
