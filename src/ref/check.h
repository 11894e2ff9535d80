// Argument checks shared by the reference ops: every view must be a contiguous CPU tensor of the
// right dtype and shape, index tensors must hold in-range values. Each throws InvalidArgument
// naming the argument.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <string_view>

#include "moefuse/tensor.h"

namespace moefuse::ref {

// An optional input that is not given: the default-constructed view (no data, rank 0).

void expect_f32(const TensorView& t, std::string_view name, std::initializer_list<int64_t> shape);
void expect_i32(const TensorView& t, std::string_view name, std::initializer_list<int64_t> shape);

// When `present`, `t` must be an fp32 tensor of `shape`; otherwise it must be absent (the reason,
// e.g. "config.expert_bias is false", goes into the message).
void expect_optional_f32(const TensorView& t, std::string_view name, bool present,
                         std::string_view why, std::initializer_list<int64_t> shape);

// Every value of an int32 view in [lo, hi).
void expect_values_in(const TensorView& t, std::string_view name, int64_t lo, int64_t hi);

// Every value of an fp32 view finite.
void expect_finite(const TensorView& t, std::string_view name);

// offsets [E+1] int32: offsets[0] >= 0, non-decreasing, offsets[E] <= rows.
void expect_offsets(const TensorView& offsets, std::string_view name, int64_t num_experts,
                    int64_t rows);

}  // namespace moefuse::ref
