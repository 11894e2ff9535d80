#include "cuda/layer/forward_fp8.h"

#include "cuda/layer/stage.h"
#include "moefuse/dispatch.h"
#include "moefuse/grouped_gemm_fp8.h"

// Designated initialisers leave the optional views (row_scale) empty on purpose.
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"

namespace moefuse::layer {

void routed_experts_fp8(const MoeConfig& c, const TensorView& x, const MoeLayerWeights& w,
                        const Views& v, const LayerRun& run, cudaStream_t stream) {
  LayerObserver* obs = run.observer;
  run_stage(LayerStage::kPermute, stream, obs, [&] {
    permute_quantize_fp8(x, v.row_of, v.token_of_row, v.xs_fp8, v.xs_scales, run.health, stream);
  });
  run_stage(LayerStage::kFc1, stream, obs, [&] {
    grouped_gemm_fp8({.a = v.xs_fp8,
                      .a_scales = v.xs_scales,
                      .b = v.w1_fp8,
                      .b_scales = v.w1_scales,
                      .offsets = v.offsets,
                      .d = v.act_fp8,  // FC2's A: E4M3 with K-major 1x128 scales
                      .epilogue = GemmEpilogue::kActivation,
                      .activation = c.activation,
                      .clamped_swiglu = c.clamped_swiglu,
                      .bias = w.b1,
                      .pre_activation = v.pre,  // cached for backward unless recompute_pre
                      .d_scales = v.act_scales},
                     stream);
  });
  run_stage(LayerStage::kFc2, stream, obs, [&] {
    grouped_gemm_fp8({.a = v.act_fp8,
                      .a_scales = v.act_scales,
                      .b = v.w2_fp8,
                      .b_scales = v.w2_scales,
                      .offsets = v.offsets,
                      .d = v.ys,
                      .row_scale = v.row_prob,
                      .bias = w.b2},
                     stream);
  });
}

}  // namespace moefuse::layer
