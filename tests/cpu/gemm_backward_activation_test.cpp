// The fused dGLU epilogue's fp32 activation derivatives (cuda/gemm/backward/activation_backward.h)
// against the fp64 reference (ref::activation_backward) on fresh random points, every activation.
// Points closer than 1e-3 to a kink (0 for ReLU kinds, ±limit for the clamps) are skipped: there
// the one-sided derivatives differ and fp32 vs fp64 rounding may pick either side. Tolerance:
// fp32 rounding, 1e-5 relative plus 2e-6·(1 + |g|)(1 + |u|) absolute.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "common/test_util.h"
#include "cuda/gemm/backward/activation_backward.h"
#include "moefuse/config.h"
#include "ref/expert_mlp.h"

namespace moefuse {
namespace {

gemm::EpilogueOp op_of(Activation a) {
  switch (a) {
    case Activation::kSwiGLU: return gemm::EpilogueOp::kSwiGLU;
    case Activation::kGeGLU: return gemm::EpilogueOp::kGeGLU;
    case Activation::kReGLU: return gemm::EpilogueOp::kReGLU;
    case Activation::kClampedSwiGLU: return gemm::EpilogueOp::kClampedSwiGLU;
    case Activation::kSquaredReLU: return gemm::EpilogueOp::kSquaredReLU;
  }
  return gemm::EpilogueOp::kLinear;
}

bool near_kink(const MoeConfig& c, double v) {
  const double limit = c.clamped_swiglu.limit;
  return std::abs(v) < 1e-3 || std::abs(v - limit) < 1e-3 || std::abs(v + limit) < 1e-3;
}

TEST(GemmBackwardActivation, MatchesTheReferenceDerivatives) {
  for (Activation act : {Activation::kSwiGLU, Activation::kGeGLU, Activation::kReGLU,
                         Activation::kClampedSwiGLU, Activation::kSquaredReLU}) {
    SCOPED_TRACE(std::string(activation_name(act)));
    // F = 1: pre holds [gate, up] (GLU) or [x]; wide enough to reach the clamps (limit 7).
    const MoeConfig config{.hidden = 8, .ffn = 1, .num_experts = 1, .top_k = 1, .activation = act};
    const gemm::EpilogueParams ep{.op = op_of(act),
                                  .clamp_alpha = config.clamped_swiglu.alpha,
                                  .clamp_limit = config.clamped_swiglu.limit};
    const std::vector<float> points = test::random_normal(2 * 4000, 5.0f);
    int checked = 0;
    for (size_t i = 0; i + 1 < points.size(); i += 2) {
      const float g = points[i], u = is_glu(act) ? points[i + 1] : 0.0f;
      if (near_kink(config, g) || (is_glu(act) && near_kink(config, u))) continue;
      const double pre[2] = {g, u}, d_out = 1.0;
      double value = 0, d_pre[2] = {0, 0};
      ref::activation_forward(config, pre, &value);
      ref::activation_backward(config, pre, &d_out, d_pre);
      const gemm::bwd::ActivationGrad got = gemm::bwd::activation_grad(ep, g, u);
      // fp32 rounding of 1 + erf and of the products grows with |g|·|u|.
      const double scale = (1.0 + std::abs(g)) * (1.0 + std::abs(u));
      auto close = [&](double a, double b) { return std::abs(a - b) <= 2e-6 * scale + 1e-5 * std::abs(b); };
      ASSERT_TRUE(close(got.value, value)) << "g " << g << " u " << u << ": " << got.value << " vs " << value;
      ASSERT_TRUE(close(got.d_gate, d_pre[0])) << "g " << g << " u " << u << ": " << got.d_gate << " vs " << d_pre[0];
      if (is_glu(act))
        ASSERT_TRUE(close(got.d_up, d_pre[1])) << "g " << g << " u " << u << ": " << got.d_up << " vs " << d_pre[1];
      ++checked;
    }
    EXPECT_GT(checked, 3000);
  }
}

}  // namespace
}  // namespace moefuse
