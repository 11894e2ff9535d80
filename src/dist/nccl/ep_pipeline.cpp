#include "dist/nccl/ep_pipeline.h"

#include "cuda/check.h"

namespace moefuse::dist {

EpPipeline::EpPipeline(int chunks) : dispatched(chunks, nullptr), computed(chunks, nullptr) {
  try {
    MOEFUSE_CUDA_CHECK(cudaStreamCreateWithFlags(&transfer, cudaStreamNonBlocking));
    for (cudaEvent_t* e : {&start, &returned})
      MOEFUSE_CUDA_CHECK(cudaEventCreateWithFlags(e, cudaEventDisableTiming));
    for (auto* list : {&dispatched, &computed})
      for (cudaEvent_t& e : *list)
        MOEFUSE_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  } catch (...) {
    release();
    throw;
  }
}

EpPipeline::~EpPipeline() { release(); }

void EpPipeline::release() noexcept {
  for (auto* list : {&dispatched, &computed})
    for (cudaEvent_t& e : *list) {
      if (e) cudaEventDestroy(e);
      e = nullptr;
    }
  for (cudaEvent_t* e : {&start, &returned}) {
    if (*e) cudaEventDestroy(*e);
    *e = nullptr;
  }
  if (transfer) cudaStreamDestroy(transfer);
  transfer = nullptr;
}

}  // namespace moefuse::dist
