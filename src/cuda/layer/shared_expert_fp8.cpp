#include "cuda/layer/shared_expert_fp8.h"

#include "cuda/layer/backward_fp8.h"
#include "cuda/layer/fp8_mlp.h"
#include "cuda/layer/ops.h"
#include "moefuse/grouped_gemm_fp8.h"
#include "moefuse/grouped_gemm_fp8_dgrad.h"
#include "moefuse/grouped_gemm_fp8_wgrad.h"

namespace moefuse::layer {
namespace {

// x [rows, K] → e4m3 codes and K-major 1x128 scales, through the row-major scale scratch (sized
// for the widest operand, seen as [rows, ceil(K/128)]).
void quantize_rows(const TensorView& x, const TensorView& codes, const TensorView& scratch,
                   const TensorView& scales, cudaStream_t stream) {
  const TensorView rows = TensorView::contiguous(
      scratch.data, DType::kFloat32, {x.size(0), fp8_scale_groups(x.size(1))}, scratch.device);
  quantize_rows_fp8(x, codes, rows, scales, stream);
}

}  // namespace

void shared_expert_forward_fp8(const MoeConfig& c, const TensorView& x,
                               const SharedExpertBuffers& b, cudaStream_t stream) {
  const SharedExpertFp8& f = b.fp8;
  quantize_rows(x, f.x, f.scales_rows, f.x_scales, stream);
  // act as FC2's E4M3 operand; pre cached for backward unless recompute_pre
  fp8_fc1(c, f.weights, b.offsets, {f.x, f.x_scales}, {}, {f.act, f.act_scales}, b.pre, stream);
  fp8_fc2(f.weights, b.offsets, {f.act, f.act_scales}, {}, {}, b.y, stream);
}

void shared_expert_backward_fp8(const MoeConfig& c, const TensorView& x, const TensorView& dy,
                                const MoeLayerGrads& g, const SharedExpertBuffers& b,
                                bool recompute, cudaStream_t stream) {
  const SharedExpertFp8& f = b.fp8;
  if (recompute) {  // the forward's codes again (the same quantiser on the same x)
    quantize_rows(x, f.x_bwd, f.scales_rows_bwd, f.x_scales_bwd, stream);
    fp8_fc1_pre(f.weights, b.offsets, {f.x_bwd, f.x_scales_bwd}, {}, b.pre, stream);
  }
  // dy's and d_pre's row-wise copies for the dgrads and, with FP8 wgrads, their column-wise ones
  // from the same read.
  auto quantize_dgrad_operand = [&](const TensorView& t, const TensorView& codes,
                                    const TensorView& scales, const TensorView& t_codes,
                                    const TensorView& t_scales) {
    if (c.bf16_wgrad) return quantize_rows(t, codes, f.scales_rows_bwd, scales, stream);
    quantize_fp8_rowcol_grouped(t, b.offsets, t_codes, t_scales, codes, scales, stream);
  };
  quantize_dgrad_operand(dy, f.dy, f.dy_scales, f.dy_t, f.dy_t_scales);
  // No row scale: act_bwd is act itself, and no dp.
  grouped_gemm_fc2_dgrad_fp8(
      fp8_fc2_dgrad_args(c, f.weights, b.offsets, {f.dy, f.dy_scales}, b.pre, b.dpre, b.act_bwd),
      {}, stream);
  quantize_dgrad_operand(b.dpre, f.dpre, f.dpre_scales, f.dpre_t, f.dpre_t_scales);
  fp8_fc1_dgrad(f.weights, b.offsets, {f.dpre, f.dpre_scales}, b.dx, stream);
  if (c.bf16_wgrad) return shared_expert_wgrads_bf16(x, dy, g, b, stream);
  quantize_fp8_colwise_grouped(b.act_bwd, b.offsets, f.act_t, f.act_t_scales, stream);
  fp8_wgrad({f.dy_t, f.dy_t_scales}, {f.act_t, f.act_t_scales}, b.offsets,
            one_expert(g.d_shared_w2), g.accumulate, stream);
  quantize_fp8_colwise_grouped(x, b.offsets, f.x_t, f.x_t_scales, stream);
  fp8_wgrad({f.dpre_t, f.dpre_t_scales}, {f.x_t, f.x_t_scales}, b.offsets,
            one_expert(g.d_shared_w1), g.accumulate, stream);
}

}  // namespace moefuse::layer
