// Which piece of a piecewise activation each pre-activation value lies on, so that a
// finite-difference test can tell when its perturbation crossed a kink (ReGLU's relu, the clamps
// of clamped SwiGLU) and retry with another direction. Squared ReLU is C1, smooth kinds have none.
#pragma once

#include <cstdint>
#include <vector>

#include "moefuse/config.h"

namespace moefuse::test {

inline std::vector<uint8_t> kink_pieces(const MoeConfig& c, const std::vector<float>& pre) {
  const int64_t F = c.ffn, fc1 = c.fc1_width();
  const float limit = c.clamped_swiglu.limit;
  std::vector<uint8_t> piece;
  if (c.activation != Activation::kReGLU && c.activation != Activation::kClampedSwiGLU)
    return piece;
  for (size_t row = 0; row + fc1 <= pre.size(); row += fc1) {
    for (int64_t i = 0; i < F; ++i) {
      const float g = pre[row + i], u = pre[row + F + i];
      if (c.activation == Activation::kReGLU) {
        piece.push_back(g > 0);
      } else {
        piece.push_back(static_cast<uint8_t>((g > limit) | (u < -limit) << 1 | (u > limit) << 2));
      }
    }
  }
  return piece;
}

}  // namespace moefuse::test
