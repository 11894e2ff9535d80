// The MoE layer under expert parallelism (EP): R ranks, one GPU each, share the E experts (rank d
// holds experts [d·E/R, (d+1)·E/R)); every rank routes its own tokens over all E, sends each row
// to its expert's rank over NCCL and gets the outputs back. Built as moefuse_ep when configure
// finds NCCL >= 2.28 (docs/ep.md); the transport is NCCL's device API over NVLink.
//
//   x [T,H] ─router─▶ maps ─permute─▶ xs ─ep_dispatch─▶ (owner) FC1 (+GLU) ─▶ FC2 ─ep_return─▶ ys
//   ─combine (· prob)─▶ y;   y += shared_expert(x) on the second stream, beside the transfers.
//
// The contract is MoeLayer's (moefuse/layer.h): caller-owned cache (per layer, forward to
// backward) and workspace, no allocation, no host sync, every call CUDA-graph capturable and
// bitwise repeatable; the expert weights and their gradients are the rank's El = E/R experts.
// Differences, each for a reason:
// - The routing weight multiplies the expert output in the combine (not in FC2's epilogue): the
//   owner of a row does not hold its token's probability. combine_backward gives d_probs.
// - The router is data-parallel: each rank routes, and computes the aux and z losses over, its
//   own T tokens (Megatron-Core's per-micro-batch statistics), and d_w_router is its tokens' part
//   of the gradient: sum it over the data-parallel group as for any replicated weight.
// - Collective calls: every rank of the communicator constructs the layer with the same config
//   and options, and calls forward and backward in the same order (each rank's T may differ, up
//   to options.max_tokens_per_rank). A rank must not wait on the host for its kernels before
//   every rank has launched the same call (the transfer kernels wait for their peers).
// - bf16 precision (config.precision kBF16) only, fused kernels only.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <nccl.h>

#include <cstddef>
#include <cstdint>
#include <memory>

#include "moefuse/config.h"
#include "moefuse/layer.h"
#include "moefuse/tensor.h"
#include "moefuse/workspace.h"

namespace moefuse {

namespace dist {
class EpComm;
class EpChunks;
class EpPipeline;
struct EpLayerViews;
}
namespace layer {
class LayerHandles;
struct ArgBounds;
}

struct EpLayerOptions {
  int64_t max_tokens_per_rank = 0;    // required: the most tokens any rank's call takes
  int64_t receive_capacity_rows = 0;  // rows a rank's experts may receive in one call; 0: the
                                      // worst case ranks·max_tokens_per_rank·top_k. Smaller:
                                      // rows past it are dropped and transport_flags() says so.
  // The transfers and expert GEMMs in `chunks` parts of the local experts, pipelined: part g's
  // FC1 and FC2 (backward: its dgrads) run while part g + 1 is dispatched and part g - 1
  // returns, so only the first dispatch and the last return of each pass are exposed. 1: one
  // transfer each way, nothing overlapped. In [1, E / ranks].
  int chunks = 1;
  // With chunks > 1: the SMs the transfer kernels take (one CTA each) while the GEMMs take the
  // rest. In [1, SMs - 1].
  int transfer_sms = 16;
  // FP8 dispatch: the forward's permute writes each row as an FP8 record (E4M3 codes of its
  // 1x128 groups and their fp32 scales, formats/fp8_row_record.h; about half of bf16's bytes),
  // those cross to the experts' ranks, and the owner decodes them into the bf16 rows its GEMMs
  // (and dW1) read. The experts thus see x quantised blockwise (DeepSeek-V3's dispatch); the
  // router, the combine and the backward's transfers stay bf16. config.hidden a multiple of 16.
  bool fp8_dispatch = false;
};

class EpMoeLayer {
 public:
  // Collective over `comm` (NCCL, one GPU a rank, all ranks in one NVLink domain), which must
  // outlive the layer; the current device must be comm's. Validates config (bf16, the one-GPU
  // layer's limits, num_experts a multiple of the rank count) and options (InvalidArgument naming
  // the field), allocates the transport's NCCL windows (symmetric memory, sized by the options),
  // the cuBLAS handle, second stream and events. Not capturable.
  EpMoeLayer(const MoeConfig& config, ncclComm_t comm, const EpLayerOptions& options);
  ~EpMoeLayer();
  EpMoeLayer(const EpMoeLayer&) = delete;
  EpMoeLayer& operator=(const EpMoeLayer&) = delete;

  const MoeConfig& config() const { return config_; }
  int rank() const;
  int ranks() const;
  int64_t first_expert() const;   // this rank's experts: [first_expert, first_expert + El)
  int64_t local_experts() const;  // El = E / ranks

  // Bytes for any T up to max_tokens_per_rank; layout for T tokens (no CUDA call).
  size_t cache_size() const;
  size_t workspace_size() const;
  LayerMemoryPlan memory_plan(int64_t tokens) const;

  // y and losses from x [T, H] bf16 (T ≤ max_tokens_per_rank); weights: w_router [E, H],
  // score_bias [E], w1 [El, fc1, H], w2 [El, H, F], b1 [El, fc1], b2 [El, H], the shared
  // expert's. Collective; CUDA-graph safe: yes.
  void forward(const TensorView& x, const MoeLayerWeights& weights, const MoeLayerOutputs& out,
               Workspace cache, Workspace workspace, cudaStream_t stream,
               const LayerRun& run = {});

  // Every gradient from dy [T, H], the same x and weights and the cache its forward wrote;
  // grads.d_w1, d_w2, d_b1, d_b2 are the rank's El experts' (summed over every rank's tokens),
  // d_w_router this rank's tokens' part. Collective; CUDA-graph safe: yes.
  void backward(const TensorView& x, const TensorView& dy, const MoeLayerWeights& weights,
                const MoeLayerGrads& grads, Workspace cache, Workspace workspace,
                cudaStream_t stream, const LayerRun& run = {});

  // [1] int32 device word of dist::EpFlag bits (rows dropped at the capacity, bad offsets); the
  // same on every rank; read and reset with moefuse/health.h.
  TensorView transport_flags() const;

 private:
  layer::ArgBounds arg_bounds() const;  // what forward's and backward's arguments are checked by
  // The parts of the transfers, and the expert GEMMs' persistent CTAs (0: every SM; pipelined:
  // those the transfers leave).
  dist::EpChunks chunks() const;
  int gemm_ctas() const;
  // Forward from the permuted rows v.xs to the returned rows: dispatch, FC1, FC2, return, in
  // options_.chunks parts (ep_layer.cpp).
  void routed_experts(const MoeLayerWeights& w, const dist::EpLayerViews& v,
                      LayerObserver* obs, cudaStream_t stream);
  // Backward from dys (this rank's rows) to the returned dxs: dispatch, FC2 dgrad (+dGLU), FC1
  // dgrad, return, in parts as the forward, and the weight gradients on the second stream
  // (ep_layer_backward.cpp).
  void routed_experts_backward(const MoeLayerWeights& w, const MoeLayerGrads& g,
                               const dist::EpLayerViews& v, LayerObserver* obs,
                               cudaStream_t stream);

  MoeConfig config_;
  EpLayerOptions options_;
  std::unique_ptr<dist::EpComm> comm_;  // the transport: its windows, device communicator
  std::unique_ptr<layer::LayerHandles> handles_;
  std::unique_ptr<dist::EpPipeline> pipeline_;  // chunks > 1: the transfer stream and events
};

}  // namespace moefuse
