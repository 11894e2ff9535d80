// The argument check the grouped GEMMs' validators share for an extent that is the row length of
// a TMA-read or 16-byte-vectorised tensor (bf16 backward and the FP8 wgrad). Host code.
#pragma once

#include <cstdint>
#include <limits>
#include <string>
#include <string_view>

#include "moefuse/error.h"

namespace moefuse::gemm {

// > 0, a multiple of 8 (16-byte strides of bf16) and below 2^31 (int32 TMA coordinates); else
// InvalidArgument naming `name`, with `what` naming the extent ("N (dim 0)").
inline void expect_row_length(int64_t v, std::string_view name, std::string_view what) {
  MOEFUSE_EXPECT(v > 0 && v % 8 == 0 && v <= std::numeric_limits<int32_t>::max(), name,
                 std::string(what) + " > 0, a multiple of 8 and below 2^31",
                 std::string(what) + " = " + std::to_string(v));
}

}  // namespace moefuse::gemm
