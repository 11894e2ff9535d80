// NaN and Inf in the layer's activations: the documented behaviour (docs/RELIABILITY.md) is IEEE
// propagation confined to what the bad values reach, plus the router's health flag. A token whose
// x holds a NaN or an Inf has non-finite logits (flag kHealthNonFiniteLogit) and a non-finite y;
// every other token's y is bit for bit what it is without the bad token (rows are independent in
// every GEMM, the combine and the shared expert: every tile runs the same wgmma shape, so a row's
// bits do not depend on where the bad tokens move it), and its dx stays finite. Sums over tokens
// (the weight gradients of the experts the token reached, d_w_router, the aux loss) may turn
// non-finite; they are not checked here.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "cuda/check.h"
#include "gpu/layer_test_fixture.h"
#include "moefuse/health.h"

namespace moefuse {
namespace {

struct Step {
  std::vector<float> y, dx;
  int flags = 0;
};

Step run_step(const MoeConfig& c, const test::LayerData& data) {
  MoeLayer layer(c, {.mode = LayerMode::kFused});
  test::DeviceLayer d(c, {.mode = LayerMode::kFused}, data.T);
  d.upload(data);
  Step s;
  s.flags = test::run_poisoned_step(layer, d, nullptr);
  s.y = test::from_bf16(d.y.download());
  s.dx = test::from_bf16(d.dx.download());
  return s;
}

bool all_non_finite(const std::vector<float>& v, int64_t t, int64_t H) {
  for (int64_t h = 0; h < H; ++h)
    if (std::isfinite(v[t * H + h])) return false;
  return true;
}

void expect_confined(const MoeConfig& c) {
  const int64_t T = 200, H = c.hidden;
  const int64_t nan_token = 17, inf_token = 123;
  test::LayerData data = test::LayerData::random(c, T);
  const Step clean = run_step(c, data);
  data.x[nan_token * H + 5] = std::numeric_limits<float>::quiet_NaN();
  data.x[inf_token * H + 9] = std::numeric_limits<float>::infinity();
  const Step bad = run_step(c, data);

  EXPECT_EQ(clean.flags & kHealthNonFiniteLogit, 0);
  EXPECT_NE(bad.flags & kHealthNonFiniteLogit, 0) << "flags " << bad.flags;
  EXPECT_TRUE(all_non_finite(bad.y, nan_token, H)) << "y of the NaN token";
  EXPECT_TRUE(all_non_finite(bad.y, inf_token, H)) << "y of the Inf token";
  int64_t changed = 0, non_finite_dx = 0;
  for (int64_t t = 0; t < T; ++t) {
    if (t == nan_token || t == inf_token) continue;
    for (int64_t h = 0; h < H; ++h) {
      const int64_t i = t * H + h;
      changed += std::bit_cast<uint32_t>(bad.y[i]) != std::bit_cast<uint32_t>(clean.y[i]);
      non_finite_dx += !std::isfinite(bad.dx[i]);
    }
  }
  EXPECT_EQ(changed, 0) << "elements of y changed in the other tokens";
  EXPECT_EQ(non_finite_dx, 0) << "non-finite elements of dx in the other tokens";
}

TEST(LayerNonFinite, BadActivationsStayInTheirTokenBf16) {
  MOEFUSE_REQUIRE_HOPPER();
  expect_confined(test::scaled_preset("qwen3-30b-a3b"));
}

// FP8: the bad token's 1x128 activation groups are its own (NaN encodes as NaN, an Inf makes its
// group's scale Inf), and the shared expert (deepseek) is row-wise too.
TEST(LayerNonFinite, BadActivationsStayInTheirTokenFp8) {
  MOEFUSE_REQUIRE_HOPPER();
  MoeConfig c = test::scaled_preset("deepseek-v3");
  c.precision = PrecisionRecipe::kFP8Blockwise;
  c.expert_bias = false;
  expect_confined(c);
}

// MXFP8: the forward's 32-element blocks are each one token's (x along H, act along F), as are
// the dgrads' row-wise ones (dys, d_pre); the wgrads' column-wise blocks mix tokens, but they
// reach only the weight gradients.
TEST(LayerNonFinite, BadActivationsStayInTheirTokenMxfp8) {
  MOEFUSE_REQUIRE_HOPPER();
  MoeConfig c = test::scaled_preset("deepseek-v3");
  c.precision = PrecisionRecipe::kMXFP8;
  expect_confined(c);
}

}  // namespace
}  // namespace moefuse
