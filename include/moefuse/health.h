// The device-side health flag: a caller-owned int32 in device memory that kernels OR bits into
// when they meet bad data (non-finite logits, indices out of range). Nothing in the hot path ever
// reads it; the caller reads it when it chooses (read_health_flags synchronises the stream).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "moefuse/tensor.h"

namespace moefuse {

enum HealthBit : int32_t {
  kHealthNonFiniteLogit = 1 << 0,     // router: a NaN or infinite logit (or score bias)
  kHealthExpertOutOfRange = 1 << 1,   // dispatch: an expert index outside [0, E)
  kHealthRowOutOfRange = 1 << 2,      // permute/combine: a row index outside [-1, R)
  kHealthRowsOverflow = 1 << 3,       // dispatch: the padded rows exceed token_of_row's R
};

// health: [1] int32 on the device. Sets it to 0. Asynchronous; CUDA-graph safe: yes.
void reset_health_flags(const TensorView& health, cudaStream_t stream);

// Waits for `stream` (cudaStreamSynchronize) and returns the flag's bits. CUDA-graph safe: no
// (it synchronises); call it outside the step, when the caller wants to know.
int32_t read_health_flags(const TensorView& health, cudaStream_t stream);

}  // namespace moefuse
