// Argument checks shared by the router and dispatch ops (and the FP8 GEMM's workspace). They run on
// the host before any CUDA call (so the bad-input tests run without a GPU) and throw
// InvalidArgument naming the argument.
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <string_view>

#include "moefuse/tensor.h"
#include "moefuse/workspace.h"

namespace moefuse::cuda {

// A contiguous device tensor of `dtype` and `shape` (kAnyExtent as a wildcard).
void expect_device(const TensorView& t, std::string_view name, DType dtype,
                   std::initializer_list<int64_t> shape);

// The health flag: absent, or [1] int32 on the device. Returns its pointer (nullptr if absent).
int32_t* expect_health(const TensorView& health);

// At least `needed` bytes, 256-byte aligned when anything is needed.
void expect_workspace(const Workspace& workspace, size_t needed);

// An integer argument in [lo, hi].
void expect_in_range(int64_t value, std::string_view name, int64_t lo, int64_t hi);

// Bytes rounded up to the 256-byte alignment workspace slices use.
constexpr size_t align_bytes(size_t bytes) { return (bytes + 255) / 256 * 256; }

}  // namespace moefuse::cuda
