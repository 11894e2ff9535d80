// The fused router's selection keys (src/cuda/router/ordered_key.h) on the CPU: their unsigned
// order against the reference's score comparison (ties, ±0, ±inf, subnormals, NaN), and a
// selection by keys (max key, lowest index, k rounds: what the kernel's warp arg-max computes)
// against ref::route on data full of ties and signed zeros.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "common/test_util.h"
#include "cuda/router/ordered_key.h"
#include "ref/router.h"

namespace moefuse {
namespace {

using cuda::key_value;
using cuda::kNaNKey;
using cuda::kNoCandidateKey;
using cuda::ordered_key;
using cuda::ordered_key32;

using Limits = std::numeric_limits<double>;

// Numbers at every scale, both signs, both zeros, neighbours that differ in the last bit, and
// float-derived values (the kernel keys fp32 logits widened to double).
std::vector<double> numbers() {
  std::vector<double> v = {0.0,          -0.0,           Limits::denorm_min(), Limits::min(),
                           1.0,          0.5,            Limits::max(),        Limits::infinity(),
                           1e-300,       0.7310585786300049};
  for (double x : {1.0, 0.5, 1e-300, Limits::min()}) {
    v.push_back(std::nextafter(x, 0.0));
    v.push_back(std::nextafter(x, 2.0));
  }
  for (float f : test::random_normal(200, 3.0f)) v.push_back(f);
  for (float f : test::random_normal(50, 1e-30f)) v.push_back(f);
  for (float f : test::random_normal(50, 1e30f)) v.push_back(f);
  const size_t n = v.size();
  for (size_t i = 0; i < n; ++i) v.push_back(-v[i]);
  return v;
}

std::vector<double> nans() {
  std::vector<double> v = {Limits::quiet_NaN(), -Limits::quiet_NaN(), Limits::signaling_NaN(),
                           std::bit_cast<double>(~uint64_t{0}),  // the all-ones pattern
                           std::bit_cast<double>(uint64_t{0x7FF0000000000001}),
                           static_cast<double>(std::bit_cast<float>(~uint32_t{0}))};
  v.push_back(-v.back());
  return v;
}

TEST(RouterOrderedKey, UnsignedOrderIsTheNumericOrder) {
  const std::vector<double> v = numbers();
  for (double a : v) {
    for (double b : v) {
      const uint64_t ka = ordered_key(a), kb = ordered_key(b);
      ASSERT_EQ(ka < kb, a < b) << a << " vs " << b;
      ASSERT_EQ(ka == kb, a == b) << a << " vs " << b;  // ±0: one key, so ties stay ties
    }
  }
}

TEST(RouterOrderedKey, KeyValueInvertsTheKey) {
  for (double a : numbers()) {
    const double want = a == 0.0 ? 0.0 : a;  // -0 comes back as +0
    EXPECT_EQ(std::bit_cast<uint64_t>(key_value(ordered_key(a))), std::bit_cast<uint64_t>(want))
        << a;
  }
  EXPECT_TRUE(std::isnan(key_value(kNaNKey)));
  EXPECT_TRUE(std::isnan(key_value(kNoCandidateKey)));
}

TEST(RouterOrderedKey, NaNsShareOneKeyBelowMinusInfinityAndAboveNoCandidate) {
  for (double n : nans()) {
    ASSERT_TRUE(std::isnan(n));
    EXPECT_EQ(ordered_key(n), kNaNKey) << std::hex << std::bit_cast<uint64_t>(n);
  }
  EXPECT_LT(kNoCandidateKey, kNaNKey);
  EXPECT_LT(kNaNKey, ordered_key(-Limits::infinity()));
  for (double a : numbers()) EXPECT_GT(ordered_key(a), kNaNKey) << a;
}

// The softmax router keys its fp32 logits in 32 bits: the same order and ties as the 64-bit key of
// the widened value, and the same special keys.
TEST(RouterOrderedKey, ThirtyTwoBitKeysOrderFloatsAsTheWideKeys) {
  std::vector<float> v;
  for (double a : numbers()) v.push_back(static_cast<float>(a));
  for (float f : {std::numeric_limits<float>::denorm_min(), std::numeric_limits<float>::min(),
                  std::numeric_limits<float>::max(), std::numeric_limits<float>::infinity()}) {
    v.push_back(f);
    v.push_back(-f);
    v.push_back(std::nextafter(f, 0.0f));
  }
  for (float a : v) {
    for (float b : v) {
      const uint64_t wa = ordered_key(a), wb = ordered_key(b);
      const uint32_t ka = ordered_key32(a), kb = ordered_key32(b);
      ASSERT_EQ(ka < kb, wa < wb) << a << " vs " << b;
      ASSERT_EQ(ka == kb, wa == wb) << a << " vs " << b;
    }
    ASSERT_GT(ordered_key32(a), kNaNKey) << a;
  }
  for (double n : nans()) EXPECT_EQ(ordered_key32(static_cast<float>(n)), kNaNKey) << n;
  EXPECT_LT(uint32_t{kNoCandidateKey}, ordered_key32(-std::numeric_limits<float>::infinity()));
}

// The kernel's selection: k rounds of (largest key, lowest index among the holders), the taken
// expert's key cleared. Returns the experts in rank order.
std::vector<int> select_by_keys(std::vector<uint64_t> keys, int64_t k) {
  std::vector<int> chosen;
  for (int64_t r = 0; r < k; ++r) {
    int best = -1;
    for (int e = 0; e < static_cast<int>(keys.size()); ++e)
      if (best < 0 || keys[e] > keys[best]) best = e;  // strict: the lower index keeps a tie
    chosen.push_back(best);
    keys[best] = kNoCandidateKey;
  }
  return chosen;
}

// Rounded logits: many exact ties, and -0 next to +0 (round(-0.3) is -0).
void check_selection(RouterKind kind, int64_t E, int64_t k, int64_t T) {
  SCOPED_TRACE("E=" + std::to_string(E) + " k=" + std::to_string(k) +
               " seed=" + std::to_string(test::seed()));
  std::vector<float> logits = test::random_normal(T * E, 2.0f);
  for (auto& x : logits) x = std::round(x);
  logits[0] = -0.0f, logits[E - 1] = 0.0f;  // the first token has a ±0 tie for sure
  const bool sigmoid = kind == RouterKind::kSigmoidGroupTopK;
  std::vector<float> bias = test::random_normal(E, 0.1f);
  for (auto& b : bias) b = std::round(b * 10) / 40;  // ties in s + bias too
  const RouterOptions o{.kind = kind, .use_score_bias = sigmoid};
  std::vector<int32_t> idx(T * k), counts(E);
  std::vector<float> probs(T * k);
  const auto view = [](auto& v, DType d, std::initializer_list<int64_t> shape) {
    return TensorView::contiguous(v.data(), d, shape, Device::kCpu);
  };
  ref::route(o, k, view(logits, DType::kFloat32, {T, E}),
             sigmoid ? view(bias, DType::kFloat32, {E}) : TensorView{},
             view(idx, DType::kInt32, {T, k}), view(probs, DType::kFloat32, {T, k}),
             view(counts, DType::kInt32, {E}));
  for (int64_t t = 0; t < T; ++t) {
    std::vector<uint64_t> keys(E);
    for (int64_t e = 0; e < E; ++e) {
      const double l = logits[t * E + e];
      // As the kernel: softmax keys on the logit, sigmoid on s + bias in fp64.
      keys[e] = ordered_key(sigmoid ? 1.0 / (1.0 + std::exp(-l)) + bias[e] : l);
    }
    const std::vector<int> got = select_by_keys(keys, k);
    for (int64_t j = 0; j < k; ++j)
      ASSERT_EQ(got[j], idx[t * k + j]) << "token " << t << " rank " << j;
  }
}

TEST(RouterOrderedKey, SelectionByKeysMatchesReferenceOnTies) {
  for (RouterKind kind : {RouterKind::kSoftmaxTopK, RouterKind::kSigmoidGroupTopK})
    for (int64_t E : {2, 7, 33})
      for (int64_t k : {1, 2, 5})
        if (k <= E) check_selection(kind, E, k, 300);
}

}  // namespace
}  // namespace moefuse
