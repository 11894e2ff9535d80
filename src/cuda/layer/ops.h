// Small helpers of forward and backward: the fused or unfused twin of a GEMM op by mode, and the
// shared expert seen as a one-expert grouped GEMM.
#pragma once

#include <cuda_runtime.h>

#include "moefuse/config.h"
#include "moefuse/grouped_gemm.h"
#include "moefuse/grouped_gemm_backward.h"
#include "moefuse/tensor.h"

namespace moefuse::layer {

// A [rows, cols] weight (or its gradient) of the shared expert as the one expert [1, rows, cols].
inline TensorView one_expert(const TensorView& w) {
  return TensorView::contiguous(w.data, w.dtype, {1, w.size(0), w.size(1)}, w.device);
}

// The layer's GEMMs read permuted rows (no gather_index), so the unfused twin needs no scratch.
inline void run_grouped_gemm(const GroupedGemmArgs& args, bool fused, cudaStream_t stream) {
  if (fused) grouped_gemm(args, stream);
  else grouped_gemm_unfused(args, {}, stream);
}

// Fused: dGLU and dp in the GEMM epilogue (dp_partial needed with d_row_scale; bias_partial
// optional with b2); unfused: plain dgrad into g, then the elementwise kernel. d_b2_units with
// d_b2, either way.
inline void run_fc2_dgrad(const Fc2DgradArgs& args, bool fused, const TensorView& dp_partial,
                          const TensorView& bias_partial, const TensorView& g,
                          const TensorView& d_b2_units, cudaStream_t stream) {
  const TensorView units = is_absent(args.d_b2) ? TensorView{} : d_b2_units;
  if (fused)
    grouped_gemm_fc2_dgrad(args,
                           {.dp_partial = dp_partial, .bias_partial = bias_partial, .g = {},
                            .d_b2_units = units},
                           stream);
  else
    grouped_gemm_fc2_dgrad_unfused(
        args, {.dp_partial = {}, .bias_partial = {}, .g = g, .d_b2_units = units}, stream);
}

}  // namespace moefuse::layer
