// The MXFP8 layer's weight region (config.precision kMXFP8): w1 and w2 quantise-dequantised
// along the K of each GEMM that reads them, bf16 in the weights' own layouts, which the BF16
// kernels read as they read the masters.
#pragma once

#include <cuda_runtime_api.h>

#include "cuda/layer/views.h"
#include "moefuse/layer.h"

namespace moefuse::layer {

// Four passes on `stream`: w1 along H and w2 along F (the forward's FC1 and FC2) row-wise; w1
// along fc1 and w2 along H (the FC1 and FC2 dgrads, which read the weights as [K, N]) down each
// expert's rows, whose counts (fc1, H) are multiples of 32, so no block spans two experts.
void prepare_mxfp8_weights(const MoeLayerWeights& weights, const Views& v, cudaStream_t stream);

}  // namespace moefuse::layer
