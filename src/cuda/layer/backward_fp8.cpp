#include "cuda/layer/backward_fp8.h"

#include "cuda/layer/fp8_mlp.h"
#include "cuda/layer/kernels.h"
#include "moefuse/dispatch.h"
#include "moefuse/grouped_gemm_fp8_dgrad.h"
#include "moefuse/grouped_gemm_fp8_wgrad.h"
#include "moefuse/quant.h"

namespace moefuse::layer {

void quantize_rows_fp8(const TensorView& x, const TensorView& codes, const TensorView& scales_rows,
                       const TensorView& scales, cudaStream_t stream) {
  quantize_fp8_blockwise_1x128(x, codes, scales_rows, stream);
  transpose_scales(scales_rows.as<float>(), scales.as<float>(), scales_rows.size(0),
                   scales_rows.size(1), scales.size(1), stream);
}

void recompute_pre_fp8(const TensorView& x, const MoeLayerWeights& w, const Views& v,
                       const TensorView& health, cudaStream_t stream) {
  permute_quantize_fp8(x, v.row_of, v.token_of_row, v.xs_fp8_bwd, v.xs_scales_bwd, health,
                       stream);
  fp8_fc1_pre(v.fp8_weights, v.offsets, {v.xs_fp8_bwd, v.xs_scales_bwd}, w.b1, v.pre_bwd,
              stream);
}

void combine_backward_fp8(const MoeConfig& c, const TensorView& dy, const Views& v,
                          const TensorView& health, cudaStream_t stream) {
  permute_quantize_fp8(dy, v.row_of, v.token_of_row, v.dys_fp8, v.dys_scales, health, stream);
  if (c.expert_bias || c.bf16_wgrad)
    combine_backward(dy, {}, {}, v.row_of, v.token_of_row, v.dys, {}, health, stream);
}

void fc2_dgrad_fp8(const MoeConfig& c, const MoeLayerWeights& w, const Views& v,
                   cudaStream_t stream) {
  Fc2DgradFp8Args args = fp8_fc2_dgrad_args(c, v.fp8_weights, v.offsets,
                                            {v.dys_fp8, v.dys_scales}, v.pre_bwd, v.dpre,
                                            v.act_bwd);
  args.row_scale = v.row_prob;  // act_bwd = p·act, and dp
  args.d_row_scale = v.d_row_prob;
  args.b2 = w.b2;
  args.dys_bf16 = c.expert_bias ? v.dys : TensorView{};  // dp's bias term reads dys unquantised
  grouped_gemm_fc2_dgrad_fp8(args, v.dp_partial, stream);
}

void fc1_dgrad_fp8(const Views& v, cudaStream_t stream) {
  if (!is_absent(v.dpre_t))  // FP8 wgrads: dW1's column-wise copy from the same read of d_pre
    quantize_fp8_rowcol_grouped(v.dpre, v.offsets, v.dpre_t, v.dpre_t_scales, v.dpre_fp8,
                                v.dpre_scales, stream);
  else
    quantize_rows_fp8(v.dpre, v.dpre_fp8, v.dpre_scales_rows, v.dpre_scales, stream);
  fp8_fc1_dgrad(v.fp8_weights, v.offsets, {v.dpre_fp8, v.dpre_scales}, v.dxs, stream);
}

void fc2_wgrad_fp8(const TensorView& dy, const MoeLayerGrads& g, const Views& v,
                   cudaStream_t stream) {
  quantize_fp8_colwise_grouped_gather(dy, v.token_of_row, v.offsets, v.dys_t, v.dys_t_scales,
                                      stream);
  quantize_fp8_colwise_grouped(v.act_bwd, v.offsets, v.act_t, v.act_t_scales, stream);
  fp8_wgrad({v.dys_t, v.dys_t_scales}, {v.act_t, v.act_t_scales}, v.offsets, g.d_w2, g.accumulate,
            stream);
}

void fc1_wgrad_fp8(const TensorView& x, const MoeLayerGrads& g, const Views& v,
                   cudaStream_t stream) {
  quantize_fp8_colwise_grouped_gather(x, v.token_of_row, v.offsets, v.xs_t, v.xs_t_scales,
                                      stream);
  fp8_wgrad({v.dpre_t, v.dpre_t_scales}, {v.xs_t, v.xs_t_scales}, v.offsets, g.d_w1, g.accumulate,
            stream);
}

}  // namespace moefuse::layer
