// Runs one stage of the layer inside an NVTX range of its name, told to the caller's observer.
#pragma once

#include <cuda_runtime.h>
#include <nvtx3/nvToolsExt.h>

#include <string>

#include "moefuse/layer.h"

namespace moefuse::layer {

// The range is popped even when the body throws (a CUDA error mid-step), so NVTX stays balanced.
template <class Body>
void run_stage(LayerStage stage, cudaStream_t stream, LayerObserver* observer, Body&& body) {
  const std::string name(layer_stage_name(stage));
  nvtxRangePushA(name.c_str());
  struct Pop {
    ~Pop() { nvtxRangePop(); }
  } pop;
  if (observer) observer->begin(stage, stream);
  body();
  if (observer) observer->end(stage, stream);
}

}  // namespace moefuse::layer
