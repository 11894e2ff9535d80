#include "ref/check.h"

#include <cmath>
#include <string>

#include "moefuse/error.h"

namespace moefuse::ref {

void expect_f32(const TensorView& t, std::string_view name, std::initializer_list<int64_t> shape) {
  expect_tensor(t, name, DType::kFloat32, Device::kCpu, shape);
}

void expect_i32(const TensorView& t, std::string_view name, std::initializer_list<int64_t> shape) {
  expect_tensor(t, name, DType::kInt32, Device::kCpu, shape);
}

void expect_optional_f32(const TensorView& t, std::string_view name, bool present,
                         std::string_view why, std::initializer_list<int64_t> shape) {
  if (present) {
    expect_f32(t, name, shape);
    return;
  }
  MOEFUSE_EXPECT(is_absent(t), name, "an empty view (" + std::string(why) + ")",
                 "a view of shape " + shape_string(t));
}

void expect_values_in(const TensorView& t, std::string_view name, int64_t lo, int64_t hi) {
  const int32_t* v = t.as<const int32_t>();
  for (int64_t i = 0; i < t.numel(); ++i) {
    MOEFUSE_EXPECT(v[i] >= lo && v[i] < hi, name,
                   "values in [" + std::to_string(lo) + ", " + std::to_string(hi) + ")",
                   std::to_string(v[i]) + " at flat index " + std::to_string(i));
  }
}

void expect_finite(const TensorView& t, std::string_view name) {
  const float* v = t.as<const float>();
  for (int64_t i = 0; i < t.numel(); ++i) {
    MOEFUSE_EXPECT(std::isfinite(v[i]), name, "finite values",
                   std::to_string(v[i]) + " at flat index " + std::to_string(i));
  }
}

void expect_offsets(const TensorView& offsets, std::string_view name, int64_t num_experts,
                    int64_t rows) {
  expect_i32(offsets, name, {num_experts + 1});
  const int32_t* o = offsets.as<const int32_t>();
  MOEFUSE_EXPECT(o[0] >= 0, name, "offsets[0] >= 0", std::to_string(o[0]));
  for (int64_t e = 0; e < num_experts; ++e) {
    MOEFUSE_EXPECT(o[e] <= o[e + 1], name, "non-decreasing offsets",
                   "offsets[" + std::to_string(e) + "] = " + std::to_string(o[e]) + " > offsets[" +
                       std::to_string(e + 1) + "] = " + std::to_string(o[e + 1]));
  }
  MOEFUSE_EXPECT(o[num_experts] <= rows, name,
                 "offsets[E] <= rows (" + std::to_string(rows) + ")",
                 std::to_string(o[num_experts]));
}

}  // namespace moefuse::ref
