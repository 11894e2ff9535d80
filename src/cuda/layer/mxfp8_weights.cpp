#include "cuda/layer/mxfp8_weights.h"

#include "moefuse/quant.h"

namespace moefuse::layer {
namespace {

// A stacked weight [E, N, K] as the [E·N, K] matrix the qdq passes take.
TensorView rows_of(const TensorView& w) {
  return TensorView::contiguous(w.data, w.dtype, {w.size(0) * w.size(1), w.size(2)}, w.device);
}

}  // namespace

void prepare_mxfp8_weights(const MoeLayerWeights& w, const Views& v, cudaStream_t stream) {
  qdq_mxfp8_rows(rows_of(w.w1), rows_of(v.w1_qdq), stream);
  qdq_mxfp8_rows(rows_of(w.w2), rows_of(v.w2_qdq), stream);
  qdq_mxfp8_cols(rows_of(w.w1), TensorView{}, rows_of(v.w1_qdq_dgrad), stream);
  qdq_mxfp8_cols(rows_of(w.w2), TensorView{}, rows_of(v.w2_qdq_dgrad), stream);
}

}  // namespace moefuse::layer
