// The overlap check of the FP8 FC2 dgrad, shared by its validation and its entry point (which
// adds the dp_partial scratch).
#pragma once

#include "moefuse/grouped_gemm_fp8_dgrad.h"
#include "moefuse/tensor.h"

namespace moefuse {

// The outputs d_pre, scaled_act, d_row_scale and `scratch` (written too; an empty view checks the
// arguments alone) against each other and every input. Throws InvalidArgument naming the output.
void expect_fc2_dgrad_fp8_disjoint(const Fc2DgradFp8Args& args, const NamedView& scratch);

}  // namespace moefuse
