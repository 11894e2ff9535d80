// The transfers of one pass of EpMoeLayer (its forward or its backward), in the parts of
// EpChunks: the dispatch of every part, the handing of each part to the GEMMs on the caller's
// stream, and the return of every part once its GEMMs are done. Unchunked, everything runs on
// the caller's stream in order; chunked, the transfers run on the pipeline's transfer stream
// (ep_pipeline.h), forked from the caller's at construction and joined back by return_rows.
#pragma once

#include <cuda_runtime.h>

#include "cuda/check.h"
#include "cuda/layer/stage.h"
#include "dist/nccl/ep_chunks.h"
#include "dist/nccl/ep_comm.h"
#include "dist/nccl/ep_pipeline.h"
#include "moefuse/layer.h"

namespace moefuse::dist {

class EpPass {
 public:
  // pipeline: the layer's (null unless chunks.pipelined()).
  EpPass(EpComm& ep, const EpChunks& chunks, EpPipeline* pipeline, cudaStream_t stream,
         LayerObserver* observer)
      : ep_(ep), chunks_(chunks), pipeline_(pipeline), stream_(stream), observer_(observer),
        tx_(chunks.pipelined() ? pipeline->transfer : stream) {
    if (chunks_.pipelined()) fork(pipeline_->start, stream_, tx_);
  }

  // Where the transfers run.
  cudaStream_t transfer_stream() const { return tx_; }

  // Every part of `rows` (this rank's, with its expert offsets) to the experts' ranks.
  void dispatch(const TensorView& rows, const TensorView& offsets, LayerStage stage) {
    layer::run_stage(stage, tx_, observer_, [&] {
      for (int g = 0; g < chunks_.count(); ++g) {
        ep_.dispatch(rows, offsets, tx_, chunks_.part(g));
        if (chunks_.pipelined()) MOEFUSE_CUDA_CHECK(cudaEventRecord(pipeline_->dispatched[g], tx_));
      }
    });
  }

  // The caller's stream waits for part g's rows, before its GEMMs.
  void await_part(int g) const {
    if (chunks_.pipelined())
      MOEFUSE_CUDA_CHECK(cudaStreamWaitEvent(stream_, pipeline_->dispatched[g], 0));
  }

  // Part g's outputs are enqueued on the caller's stream: its return may follow them.
  void part_computed(int g) const {
    if (chunks_.pipelined()) MOEFUSE_CUDA_CHECK(cudaEventRecord(pipeline_->computed[g], stream_));
  }

  // Every part of `rows` (the receive layout) back to its sources, each after its GEMMs; then
  // the caller's stream waits for them.
  void return_rows(const TensorView& rows, LayerStage stage) {
    layer::run_stage(stage, tx_, observer_, [&] {
      for (int g = 0; g < chunks_.count(); ++g) {
        if (chunks_.pipelined())
          MOEFUSE_CUDA_CHECK(cudaStreamWaitEvent(tx_, pipeline_->computed[g], 0));
        ep_.return_rows(rows, tx_, chunks_.part(g));
      }
    });
    if (chunks_.pipelined()) fork(pipeline_->returned, tx_, stream_);
  }

 private:
  static void fork(cudaEvent_t event, cudaStream_t from, cudaStream_t to) {
    MOEFUSE_CUDA_CHECK(cudaEventRecord(event, from));
    MOEFUSE_CUDA_CHECK(cudaStreamWaitEvent(to, event, 0));
  }

  EpComm& ep_;
  const EpChunks& chunks_;
  EpPipeline* pipeline_;
  cudaStream_t stream_;
  LayerObserver* observer_;
  cudaStream_t tx_;
};

}  // namespace moefuse::dist
