// Checks of the FC2 dgrad's scratch that its MXFP8 twin makes too, before its bf16 copies of
// dys and w2 exist (hence the extents as numbers).
#pragma once

#include <cstdint>

#include "moefuse/tensor.h"

namespace moefuse::gemm::bwd {

// scratch.d_b2_units, given iff d_b2 is: [fc2_dgrad_d_b2_units(m_cap, experts), hidden] fp32.
void expect_d_b2_units(const TensorView& d_b2, const TensorView& d_b2_units, int64_t m_cap,
                       int64_t experts, int64_t hidden);

}  // namespace moefuse::gemm::bwd
