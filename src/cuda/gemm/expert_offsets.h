// The argument check of an expert offsets tensor that alone says how many experts there are (the
// FP8 wgrad's and the MXFP8 column-wise qdq's: no weight carries E). Host code.
#pragma once

#include <cstdint>
#include <string>

#include "moefuse/error.h"
#include "moefuse/grouped_gemm.h"
#include "moefuse/tensor.h"

namespace moefuse::gemm {

// offsets int32 [E+1] on `device` with 1 <= E <= kGroupedGemmMaxExperts; returns E. Else
// InvalidArgument naming "offsets".
inline int64_t expect_expert_offsets(const TensorView& offsets, Device device) {
  MOEFUSE_EXPECT(offsets.rank == 1, "offsets", "rank 1 [E+1]",
                 "rank " + std::to_string(offsets.rank));
  const int64_t e = offsets.size(0) - 1;
  MOEFUSE_EXPECT(e >= 1 && e <= kGroupedGemmMaxExperts, "offsets",
                 "E + 1 entries with 1 <= E <= " + std::to_string(kGroupedGemmMaxExperts),
                 std::to_string(offsets.size(0)) + " entries");
  expect_tensor(offsets, "offsets", DType::kInt32, device, {e + 1});
  return e;
}

}  // namespace moefuse::gemm
