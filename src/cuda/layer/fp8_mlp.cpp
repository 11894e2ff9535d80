#include "cuda/layer/fp8_mlp.h"

#include "moefuse/grouped_gemm_fp8.h"
#include "moefuse/grouped_gemm_fp8_dgrad.h"
#include "moefuse/grouped_gemm_fp8_wgrad.h"
#include "moefuse/quant.h"

// Designated initialisers leave the optional views (row_scale, ...) empty on purpose.
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"

namespace moefuse::layer {
namespace {

// d = a · bᵀ per expert with the linear epilogue (row scale and bias when present).
void linear(const Fp8Rows& a, const TensorView& b, const TensorView& b_scales,
            const TensorView& offsets, const TensorView& row_scale, const TensorView& bias,
            const TensorView& d, cudaStream_t stream) {
  grouped_gemm_fp8({.a = a.codes,
                    .a_scales = a.scales,
                    .b = b,
                    .b_scales = b_scales,
                    .offsets = offsets,
                    .d = d,
                    .row_scale = row_scale,
                    .bias = bias},
                   stream);
}

}  // namespace

void prepare_fp8_mlp_weights(const TensorView& w1, const TensorView& w2, const Fp8MlpWeights& w,
                             cudaStream_t stream) {
  quantize_fp8_blockwise_128x128(w1, w.w1, w.w1_scales, stream);
  quantize_fp8_blockwise_128x128(w2, w.w2, w.w2_scales, stream);
  transpose_fp8_blockwise_weights(w.w1, w.w1_scales, w.w1t, w.w1t_scales, stream);
  transpose_fp8_blockwise_weights(w.w2, w.w2_scales, w.w2t, w.w2t_scales, stream);
}

void fp8_fc1(const MoeConfig& c, const Fp8MlpWeights& w, const TensorView& offsets,
             const Fp8Rows& x, const TensorView& b1, const Fp8Rows& act, const TensorView& pre,
             cudaStream_t stream) {
  grouped_gemm_fp8({.a = x.codes,
                    .a_scales = x.scales,
                    .b = w.w1,
                    .b_scales = w.w1_scales,
                    .offsets = offsets,
                    .d = act.codes,
                    .epilogue = GemmEpilogue::kActivation,
                    .activation = c.activation,
                    .clamped_swiglu = c.clamped_swiglu,
                    .bias = b1,
                    .pre_activation = pre,
                    .d_scales = act.scales},
                   stream);
}

void fp8_fc1_pre(const Fp8MlpWeights& w, const TensorView& offsets, const Fp8Rows& x,
                 const TensorView& b1, const TensorView& pre, cudaStream_t stream) {
  linear(x, w.w1, w.w1_scales, offsets, {}, b1, pre, stream);
}

void fp8_fc2(const Fp8MlpWeights& w, const TensorView& offsets, const Fp8Rows& act,
             const TensorView& row_scale, const TensorView& b2, const TensorView& out,
             cudaStream_t stream) {
  linear(act, w.w2, w.w2_scales, offsets, row_scale, b2, out, stream);
}

Fc2DgradFp8Args fp8_fc2_dgrad_args(const MoeConfig& c, const Fp8MlpWeights& w,
                                   const TensorView& offsets, const Fp8Rows& dys,
                                   const TensorView& pre, const TensorView& d_pre,
                                   const TensorView& scaled_act) {
  return {.dys = dys.codes,
          .dys_scales = dys.scales,
          .w2t = w.w2t,
          .w2t_scales = w.w2t_scales,
          .offsets = offsets,
          .pre = pre,
          .d_pre = d_pre,
          .activation = c.activation,
          .clamped_swiglu = c.clamped_swiglu,
          .scaled_act = scaled_act};
}

void fp8_fc1_dgrad(const Fp8MlpWeights& w, const TensorView& offsets, const Fp8Rows& d_pre,
                   const TensorView& dxs, cudaStream_t stream) {
  linear(d_pre, w.w1t, w.w1t_scales, offsets, {}, {}, dxs, stream);
}

void fp8_wgrad(const Fp8Cols& a, const Fp8Cols& b, const TensorView& offsets, const TensorView& d,
               bool accumulate, cudaStream_t stream) {
  grouped_gemm_fp8_wgrad({.at = a.codes,
                          .a_scales = a.scales,
                          .bt = b.codes,
                          .b_scales = b.scales,
                          .offsets = offsets,
                          .d = d,
                          .accumulate = accumulate},
                         stream);
}

}  // namespace moefuse::layer
