#include "cuda/layer/shared_expert.h"

#include "cuda/layer/kernels.h"
#include "cuda/layer/ops.h"
#include "cuda/layer/shared_expert_fp8.h"
#include "moefuse/grouped_gemm.h"
#include "moefuse/grouped_gemm_backward.h"

// Designated initialisers leave the optional views (bias, row_scale, ...) empty on purpose.
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"

namespace moefuse::layer {

void shared_expert_forward(const MoeConfig& c, const TensorView& x, const MoeLayerWeights& w,
                           const SharedExpertBuffers& b, bool fused, cudaStream_t stream) {
  write_shared_offsets(b.offsets.as<int32_t>(), x.size(0), stream);
  if (c.precision == PrecisionRecipe::kFP8Blockwise)
    return shared_expert_forward_fp8(c, x, b, stream);
  run_grouped_gemm({.a = x,
                    .b = one_expert(w.shared_w1),
                    .offsets = b.offsets,
                    .d = b.act,
                    .epilogue = GemmEpilogue::kActivation,
                    .activation = c.activation,
                    .clamped_swiglu = c.clamped_swiglu,
                    .pre_activation = b.pre},
                   fused, stream);
  run_grouped_gemm({.a = b.act, .b = one_expert(w.shared_w2), .offsets = b.offsets, .d = b.y},
                   fused, stream);
}

void shared_expert_backward(const MoeConfig& c, const TensorView& x, const TensorView& dy,
                            const MoeLayerWeights& w, const MoeLayerGrads& g,
                            const SharedExpertBuffers& b, bool recompute, bool fused,
                            cudaStream_t stream) {
  if (c.precision == PrecisionRecipe::kFP8Blockwise)
    return shared_expert_backward_fp8(c, x, dy, g, b, recompute, stream);
  const TensorView sw1 = one_expert(w.shared_w1), sw2 = one_expert(w.shared_w2);
  if (recompute)
    run_grouped_gemm({.a = x, .b = sw1, .offsets = b.offsets, .d = b.pre}, fused, stream);
  run_fc2_dgrad({.dys = dy,
                 .w2 = sw2,
                 .offsets = b.offsets,
                 .pre = b.pre,
                 .d_pre = b.dpre,
                 .activation = c.activation,
                 .clamped_swiglu = c.clamped_swiglu,
                 .scaled_act = b.act_bwd},
                fused, {}, {}, b.g, {}, stream);
  grouped_gemm_dgrad({.a = b.dpre, .b = sw1, .offsets = b.offsets, .d = b.dx}, stream);
  shared_expert_wgrads_bf16(x, dy, g, b, stream);
}

void shared_expert_wgrads_bf16(const TensorView& x, const TensorView& dy, const MoeLayerGrads& g,
                               const SharedExpertBuffers& b, cudaStream_t stream) {
  grouped_gemm_wgrad({.a = dy,
                      .b = b.act_bwd,
                      .offsets = b.offsets,
                      .d = one_expert(g.d_shared_w2),
                      .accumulate = g.accumulate},
                     stream);
  grouped_gemm_wgrad({.a = b.dpre,
                      .b = x,
                      .offsets = b.offsets,
                      .d = one_expert(g.d_shared_w1),
                      .accumulate = g.accumulate},
                     stream);
}

}  // namespace moefuse::layer
