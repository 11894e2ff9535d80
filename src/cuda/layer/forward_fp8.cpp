#include "cuda/layer/forward_fp8.h"

#include "cuda/layer/fp8_mlp.h"
#include "cuda/layer/stage.h"
#include "moefuse/dispatch.h"

namespace moefuse::layer {

void routed_experts_fp8(const MoeConfig& c, const TensorView& x, const MoeLayerWeights& w,
                        const Views& v, const LayerRun& run, cudaStream_t stream) {
  LayerObserver* obs = run.observer;
  run_stage(LayerStage::kPermute, stream, obs, [&] {
    permute_quantize_fp8(x, v.row_of, v.token_of_row, v.xs_fp8, v.xs_scales, run.health, stream);
  });
  run_stage(LayerStage::kFc1, stream, obs, [&] {
    // act as FC2's E4M3 operand; pre cached for backward unless recompute_pre
    fp8_fc1(c, v.fp8_weights, v.offsets, {v.xs_fp8, v.xs_scales}, w.b1, {v.act_fp8, v.act_scales},
            v.pre, stream);
  });
  run_stage(LayerStage::kFc2, stream, obs, [&] {
    fp8_fc2(v.fp8_weights, v.offsets, {v.act_fp8, v.act_scales}, v.row_prob, w.b2, v.ys, stream);
  });
}

}  // namespace moefuse::layer
