// The CPU reference of the MXFP8 forward and backward (src/ref/layer_mxfp8.h): its distance from
// the bf16 reference is the recipe's quantisation error, measured here on Gaussian data for every
// preset's kind of layer at test size, for y and every gradient; the GPU test uses the bounds
// these measurements justify (ref/layer_fp8_tolerance.h, MXFP8's).
#include <gtest/gtest.h>

#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "common/test_util.h"
#include "ref/layer.h"
#include "ref/layer_fp8_tolerance.h"
#include "ref/layer_mxfp8.h"
#include "ref_layer_data.h"
#include "ref_test_helpers.h"

namespace moefuse {
namespace {

using test::bf16_normal;
using Data = test::RefLayerData;
using Grads = test::RefLayerGrads;

std::vector<std::pair<std::string, MoeConfig>> configs() {
  std::vector<std::pair<std::string, MoeConfig>> out;
  for (const char* name : {"qwen3-30b-a3b", "gpt-oss-120b", "mixtral-8x7b", "deepseek-v3"})
    out.push_back({name, test::small_layer(name, PrecisionRecipe::kMXFP8)});
  for (Activation a : {Activation::kGeGLU, Activation::kSquaredReLU}) {
    out.push_back({std::string(activation_name(a)),
                   test::small_layer("qwen3-30b-a3b", PrecisionRecipe::kMXFP8)});
    out.back().second.activation = a;
  }
  return out;
}

TEST(RefLayerMxfp8, ForwardQuantisationErrorIsWithinTheDocumentedBound) {
  for (const auto& [name, c] : configs()) {
    SCOPED_TRACE(name);
    Data d(c, 96);
    const ref::LayerWeights w = d.weights();
    const ref::LayerForward bf16 = ref::layer_forward(c, w, d.xv());
    const std::vector<float> y = ref::layer_forward_mxfp8(c, w, d.xv(), bf16);
    const double err = test::rel_norm_error(y, bf16.y);
    std::printf("[ mxfp8 ] %-14s y rel-norm error vs bf16 reference: %.4f (bound %.3f)\n",
                name.c_str(), err, ref::kMxfp8LayerForwardTolerance);
    EXPECT_LE(err, ref::kMxfp8LayerForwardTolerance);
    EXPECT_GE(err, 1e-3) << "the operands should have been quantised";
  }
}

// Every gradient against ref::layer_backward on the same inputs and routing; the shared
// expert's stay bf16 (equal), d_b2 = Σ p·dys meets no quantised operand (the bf16 bound).
TEST(RefLayerMxfp8, BackwardQuantisationErrorIsWithinTheDocumentedBounds) {
  for (const auto& [name, c] : configs()) {
    SCOPED_TRACE(name);
    Data d(c, 96);
    std::vector<float> dy = bf16_normal(d.T * c.hidden, 1.0f);
    const ref::LayerWeights w = d.weights();
    const ref::LayerForward fwd = ref::layer_forward(c, w, d.xv());
    Grads bf16(c, d.T), mx(c, d.T);
    const TensorView dyv = TensorView::contiguous(dy.data(), DType::kFloat32, {d.T, c.hidden});
    ref::layer_backward(c, w, d.xv(), fwd, dyv, bf16.views);
    ref::layer_backward_mxfp8(c, w, d.xv(), fwd, dyv, mx.views);
    for (const auto& [grad, pair] : mx.paired_with(bf16)) {
      if (pair.first->empty()) continue;
      const double err = test::rel_norm_error(*pair.first, *pair.second);
      const double tol = ref::mxfp8_layer_gradient_tolerance(grad);
      std::printf("[ mxfp8 ] %-14s %-12s rel-norm error vs bf16 reference: %.4f (bound %.3f)\n",
                  name.c_str(), grad.c_str(), err, tol);
      EXPECT_LE(err, tol) << grad;
      if (grad.rfind("d_shared", 0) == 0) EXPECT_EQ(err, 0.0) << grad;
      else if (grad != "d_b2") EXPECT_GE(err, 1e-3) << grad << " not quantised?";
    }
  }
}

// config.bf16_wgrad changes d_w1 and d_w2 only, and brings them closer to the bf16 reference.
TEST(RefLayerMxfp8, Bf16WgradsChangeOnlyTheWeightGradients) {
  for (const char* name : {"qwen3-30b-a3b", "gpt-oss-120b"}) {
    SCOPED_TRACE(name);
    Data d(test::small_layer(name, PrecisionRecipe::kMXFP8), 96);
    MoeConfig c16 = d.c;
    c16.bf16_wgrad = true;
    std::vector<float> dy = bf16_normal(d.T * d.c.hidden, 1.0f);
    const ref::LayerWeights w = d.weights();
    const ref::LayerForward fwd = ref::layer_forward(d.c, w, d.xv());
    Grads bf16(d.c, d.T), mx(d.c, d.T), mx16(d.c, d.T);
    const TensorView dyv = TensorView::contiguous(dy.data(), DType::kFloat32, {d.T, d.c.hidden});
    ref::layer_backward(d.c, w, d.xv(), fwd, dyv, bf16.views);
    ref::layer_backward_mxfp8(d.c, w, d.xv(), fwd, dyv, mx.views);
    ref::layer_backward_mxfp8(c16, w, d.xv(), fwd, dyv, mx16.views);
    const auto vs_mx = mx16.paired_with(mx);
    const auto vs_bf16 = mx16.paired_with(bf16);
    for (size_t i = 0; i < vs_mx.size(); ++i) {
      const auto& [grad, pair] = vs_mx[i];
      if (grad != "d_w1" && grad != "d_w2") {
        EXPECT_EQ(*pair.first, *pair.second) << grad << " should not depend on the wgrads";
        continue;
      }
      const std::vector<float>& want = *vs_bf16[i].second.second;
      EXPECT_LT(test::rel_norm_error(*pair.first, want), test::rel_norm_error(*pair.second, want))
          << grad;
    }
  }
}

}  // namespace
}  // namespace moefuse
