// Helpers of the reference-backend tests (tests/cpu/ref_*_test.cpp): views over vectors and the
// finite-difference check of a gradient (the bad-input expectation is test::expect_invalid).
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common/margins.h"
#include "common/test_util.h"
#include "moefuse/error.h"
#include "moefuse/tensor.h"

namespace moefuse::test {

inline TensorView f32(std::vector<float>& v, std::initializer_list<int64_t> shape) {
  return TensorView::contiguous(v.data(), DType::kFloat32, shape);
}
inline TensorView i32(std::vector<int32_t>& v, std::initializer_list<int64_t> shape) {
  return TensorView::contiguous(v.data(), DType::kInt32, shape);
}

inline double dot(const std::vector<float>& a, const std::vector<float>& b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += static_cast<double>(a[i]) * b[i];
  return s;
}

// Central finite difference of a scalar loss along a random direction of one fp32 parameter,
// against the analytic directional derivative sum_i grad_i * (p+_i - p-_i). The realised step
// p+ - p- (after rounding to fp32) is used on both sides, so the rounding of the perturbed
// parameter itself causes no error.
//
// `loss` evaluates the loss for the current contents of `param`, or returns nullopt when the
// perturbation moved the computation onto another piece of a piecewise function (a different
// top-k selection, a ReLU or clamp kink crossed): then a new direction is drawn.
//
// The error is |fd - analytic| / max(|analytic|, rms), where rms = ||grad|| ||step|| / sqrt(n) is
// the typical size of the directional derivative along a random direction, so that a direction
// that happens to be nearly orthogonal to the gradient does not turn rounding noise into a failure.
inline constexpr int kFdDirections = 20;

struct FdResult {
  double fd = 0, analytic = 0, error = INFINITY;
  int attempts = 0;
};

inline FdResult finite_difference(std::vector<float>& param, const std::vector<float>& grad,
                                  double eps, const std::function<std::optional<double>()>& loss) {
  FdResult r;
  const std::vector<float> saved = param;
  for (r.attempts = 1; r.attempts <= kFdDirections; ++r.attempts) {
    const std::vector<float> dir = random_normal(param.size());
    std::vector<float> plus(param.size()), minus(param.size());
    for (size_t i = 0; i < param.size(); ++i) {
      plus[i] = static_cast<float>(saved[i] + eps * dir[i]);
      minus[i] = static_cast<float>(saved[i] - eps * dir[i]);
    }
    param = plus;
    const std::optional<double> lp = loss();
    param = minus;
    const std::optional<double> lm = loss();
    param = saved;
    if (!lp || !lm) continue;
    double analytic = 0, g2 = 0, s2 = 0;
    for (size_t i = 0; i < param.size(); ++i) {
      const double step = static_cast<double>(plus[i]) - minus[i];
      analytic += grad[i] * step;
      g2 += static_cast<double>(grad[i]) * grad[i];
      s2 += step * step;
    }
    const double rms = std::sqrt(g2 * s2 / static_cast<double>(param.size()));
    r.fd = *lp - *lm;
    r.analytic = analytic;
    r.error = std::abs(r.fd - analytic) / std::max({std::abs(analytic), rms, 1e-300});
    return r;
  }
  return r;  // every direction crossed a kink: attempts > kFdDirections, error +inf
}

// The finite differences of several parameters under one loss, each under its name. A draw
// returns its report when done: from then on only results() may be used (the loss's captures
// are gone).
class FdReport {
 public:
  using Loss = std::function<std::optional<double>()>;
  explicit FdReport(Loss loss) : loss_(std::move(loss)) {}
  // Checks one parameter; false when every direction crossed a kink (the draw is unusable).
  bool add(const char* name, std::vector<float>& param, const std::vector<float>& grad,
           double eps) {
    results_.emplace_back(name, finite_difference(param, grad, eps, loss_));
    return results_.back().second.attempts <= kFdDirections;
  }
  const std::vector<std::pair<std::string, FdResult>>& results() const { return results_; }

 private:
  Loss loss_;
  std::vector<std::pair<std::string, FdResult>> results_;
};

// Up to five draws, each `draw()` giving a report or nullopt when unusable; every error of the
// first usable one must be below `bound` (each recorded by record_margin). Five unusable draws
// fail with `unusable`.
inline void expect_fd_within(const std::function<std::optional<FdReport>()>& draw, double bound,
                             const std::string& unusable) {
  for (int n = 0; n < 5; ++n) {
    const std::optional<FdReport> report = draw();
    if (!report) continue;
    for (const auto& [name, fd] : report->results()) {
      record_margin(name, fd.error, bound);
      EXPECT_LT(fd.error, bound) << name << ": fd " << fd.fd << " analytic " << fd.analytic;
    }
    return;
  }
  FAIL() << unusable;
}

}  // namespace moefuse::test
