// EpMoeLayer: construction, sizes and the forward pass. The backward is in ep_layer_backward.cpp.
//
// Forward, main stream:
//   router_logits → router_topk (this rank's tokens) → dispatch_maps → permute (x → xs)
//   → ep_dispatch (xs rows to their experts' ranks: received(), receive_offsets())
//   → FC1 over the received rows (GLU + bias in the epilogue, pre cached) → FC2 (+ bias)
//   → ep_return (outputs back into this rank's xs layout: returned()) → combine (· prob)
//   → y += shared expert's output.
// Second stream: the shared expert (from the start, beside the router and the dispatch), then the
// copy of the received rows into the cache (dW1's operand; the backward's dispatch overwrites
// received()), beside FC1.
// FP8 dispatch (options.fp8_dispatch): the permute writes FP8 row records, they cross instead of
// bf16 rows, and each part's records are decoded into the cache's received rows (main stream,
// before that part's FC1), which FC1 then reads.
#include <string>

#include "cuda/check.h"
#include "cuda/layer/kernels.h"
#include "cuda/layer/layer_args.h"
#include "cuda/layer/layer_handles.h"
#include "cuda/layer/ops.h"
#include "cuda/layer/routing.h"
#include "cuda/layer/shared_expert.h"
#include "cuda/layer/stage.h"
#include "cuda/quant/fp8_records.h"
#include "cuda/sm_count.h"
#include "dist/ep_layer_plan.h"
#include "dist/nccl/ep_chunks.h"
#include "dist/nccl/ep_comm.h"
#include "dist/nccl/ep_pass.h"
#include "dist/nccl/ep_pipeline.h"
#include "dist/nccl/nccl_check.h"
#include "formats/fp8_row_record.h"
#include "moefuse/dispatch.h"
#include "moefuse/ep_layer.h"
#include "moefuse/error.h"
#include "moefuse/grouped_gemm.h"
#include "moefuse/router.h"

// Designated initialisers leave the optional views (bias, row_scale, ...) empty on purpose.
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"

namespace moefuse {
namespace {

// The transport's plan for this rank of `comm`, the options checked under their own names first.
dist::EpPlan ep_plan(const MoeConfig& c, ncclComm_t comm, const EpLayerOptions& o) {
  MOEFUSE_EXPECT(comm != nullptr, "comm", "an NCCL communicator", "null");
  MOEFUSE_EXPECT(o.max_tokens_per_rank >= 1, "options.max_tokens_per_rank", "at least 1",
                 std::to_string(o.max_tokens_per_rank));
  MOEFUSE_EXPECT(o.receive_capacity_rows >= 0, "options.receive_capacity_rows",
                 "0 (the worst case) or a positive row count",
                 std::to_string(o.receive_capacity_rows));
  int ranks = 0, rank = 0;
  MOEFUSE_NCCL_CHECK(comm, ncclCommCount(comm, &ranks));
  MOEFUSE_NCCL_CHECK(comm, ncclCommUserRank(comm, &rank));
  MOEFUSE_EXPECT(c.num_experts % ranks == 0, "config.num_experts",
                 "a multiple of the communicator's " + std::to_string(ranks) + " ranks",
                 std::to_string(c.num_experts));
  return dist::make_ep_plan({.experts = static_cast<int>(c.num_experts),
                             .ranks = ranks,
                             .rank = rank,
                             .max_tokens_per_rank = o.max_tokens_per_rank,
                             .top_k = static_cast<int>(c.top_k),
                             .receive_capacity_rows = o.receive_capacity_rows});
}

// The FP8 dispatch's records of the permuted rows, in xs's own bytes (a record is at most 2H).
TensorView records_view(const TensorView& xs) {
  return TensorView::contiguous(xs.data, DType::kUInt8,
                                {xs.size(0), formats::fp8_record_bytes(xs.size(1))},
                                Device::kCuda);
}

}  // namespace

EpMoeLayer::EpMoeLayer(const MoeConfig& config, ncclComm_t comm, const EpLayerOptions& options)
    : config_(config), options_(options) {
  layer::check_layer_config(config_);
  MOEFUSE_EXPECT(config_.precision == PrecisionRecipe::kBF16, "config.precision",
                 "bf16 (the expert-parallel layer has no FP8 path yet)",
                 std::string(precision_name(config_.precision)));
  // Before ep_plan, which is the first to use the communicator.
  MOEFUSE_EXPECT(!options_.fp8_dispatch || config_.hidden % 16 == 0, "options.fp8_dispatch",
                 "false, or config.hidden a multiple of 16 (16-byte E4M3 code rows)",
                 "true with hidden " + std::to_string(config_.hidden));
  const dist::EpPlan plan = ep_plan(config_, comm, options_);
  MOEFUSE_EXPECT(options_.chunks >= 1 && options_.chunks <= plan.experts_per_rank,
                 "options.chunks",
                 "in [1, experts per rank = " + std::to_string(plan.experts_per_rank) + "]",
                 std::to_string(options_.chunks));
  if (options_.chunks > 1) {
    const int sms = cuda::device_sm_count();
    MOEFUSE_EXPECT(options_.transfer_sms >= 1 && options_.transfer_sms < sms,
                   "options.transfer_sms", "in [1, " + std::to_string(sms - 1) + "]",
                   std::to_string(options_.transfer_sms));
  }
  comm_ = std::make_unique<dist::EpComm>(comm, plan, static_cast<int>(config_.hidden));
  handles_ = std::make_unique<layer::LayerHandles>();
  if (options_.chunks > 1) pipeline_ = std::make_unique<dist::EpPipeline>(options_.chunks);
}

EpMoeLayer::~EpMoeLayer() = default;

int EpMoeLayer::rank() const { return comm_->rank(); }
int EpMoeLayer::ranks() const { return comm_->ranks(); }
int64_t EpMoeLayer::first_expert() const { return comm_->plan().first_expert; }
int64_t EpMoeLayer::local_experts() const { return comm_->plan().experts_per_rank; }

LayerMemoryPlan EpMoeLayer::memory_plan(int64_t tokens) const {
  MOEFUSE_EXPECT(tokens >= 1 && tokens <= options_.max_tokens_per_rank, "tokens",
                 "in [1, options.max_tokens_per_rank = " +
                     std::to_string(options_.max_tokens_per_rank) + "]",
                 std::to_string(tokens));
  dist::EpLayerPlan p = dist::make_ep_layer_plan(config_, comm_->plan(), tokens);
  return {.buffers = std::move(p.buffers),
          .cache_bytes = p.cache_bytes,
          .workspace_bytes = p.workspace_bytes,
          .fp8_weight_bytes = 0};
}

size_t EpMoeLayer::cache_size() const {
  return memory_plan(options_.max_tokens_per_rank).cache_bytes;
}

size_t EpMoeLayer::workspace_size() const {
  return memory_plan(options_.max_tokens_per_rank).workspace_bytes;
}

TensorView EpMoeLayer::transport_flags() const { return comm_->flags(); }

dist::EpChunks EpMoeLayer::chunks() const {
  return dist::EpChunks(*comm_, options_.chunks, options_.chunks > 1 ? options_.transfer_sms : 0);
}

int EpMoeLayer::gemm_ctas() const {
  return options_.chunks > 1 ? cuda::device_sm_count() - options_.transfer_sms : 0;
}

layer::ArgBounds EpMoeLayer::arg_bounds() const {
  return {.experts_held = local_experts(),
          .max_tokens = options_.max_tokens_per_rank,
          .region_bytes = [this](int64_t tokens) {
            const dist::EpLayerPlan p = dist::make_ep_layer_plan(config_, comm_->plan(), tokens);
            return layer::RegionBytes{.cache = p.cache_bytes, .workspace = p.workspace_bytes};
          }};
}

void EpMoeLayer::routed_experts(const MoeLayerWeights& w, const dist::EpLayerViews& v,
                                LayerObserver* obs, cudaStream_t stream) {
  layer::LayerHandles& h = *handles_;
  const dist::EpComm& ep = *comm_;
  const dist::EpChunks chunks = this->chunks();
  dist::EpPass pass(*comm_, chunks, pipeline_.get(), stream, obs);
  const int gemm_ctas = this->gemm_ctas();

  const bool fp8 = options_.fp8_dispatch;
  pass.dispatch(fp8 ? records_view(v.xs) : v.xs, v.offsets, LayerStage::kEpDispatch);
  if (!fp8) {
    // dW1's rows, kept past the backward's dispatch (which overwrites received()), on the second
    // stream; the combine joins it. (FP8: each part's decode writes them there, below.)
    h.fork(h.fork_event, pass.transfer_stream(), h.side);
    layer::copy_leading_rows(ep.received().as<__nv_bfloat16>(),
                             v.xs_received.as<__nv_bfloat16>(),
                             ep.receive_offsets().as<int32_t>() + local_experts(),
                             v.xs_received.size(0), config_.hidden, h.side);
  }

  for (int g = 0; g < chunks.count(); ++g) {
    pass.await_part(g);
    if (fp8)
      layer::run_stage(LayerStage::kEpDecode, stream, obs, [&] {
        const dist::TransferPart part = chunks.part(g);
        cuda::unpack_fp8_records(ep.received_records(), ep.receive_offsets(), part.first_expert,
                                 part.end_expert, v.xs_received, stream);
      });
    layer::run_stage(LayerStage::kFc1, stream, obs, [&] {
      grouped_gemm({.a = fp8 ? v.xs_received : ep.received(),
                    .b = chunks.experts(w.w1, g),
                    .offsets = chunks.offsets(g),
                    .d = v.act,
                    .epilogue = GemmEpilogue::kActivation,
                    .activation = config_.activation,
                    .clamped_swiglu = config_.clamped_swiglu,
                    .bias = chunks.experts(w.b1, g),
                    .pre_activation = v.pre,
                    .max_ctas = gemm_ctas},
                   stream);
    });
    layer::run_stage(LayerStage::kFc2, stream, obs, [&] {
      grouped_gemm({.a = v.act,
                    .b = chunks.experts(w.w2, g),
                    .offsets = chunks.offsets(g),
                    .d = v.ys,
                    .bias = chunks.experts(w.b2, g),
                    .max_ctas = gemm_ctas},
                   stream);
    });
    pass.part_computed(g);
  }
  pass.return_rows(v.ys, LayerStage::kEpReturn);
}

void EpMoeLayer::forward(const TensorView& x, const MoeLayerWeights& w,
                         const MoeLayerOutputs& out, Workspace cache, Workspace workspace,
                         cudaStream_t stream, const LayerRun& run) {
  const int64_t T =
      layer::check_forward_args(config_, arg_bounds(), x, w, out, cache, workspace, run.health);
  layer::LayerHandles& h = *handles_;
  h.expect_launchable_here(stream, "EpMoeLayer");
  const dist::EpLayerPlan p = dist::make_ep_layer_plan(config_, comm_->plan(), T);
  const dist::EpLayerViews v = dist::make_ep_layer_views(config_, p, cache, workspace);
  dist::EpComm& ep = *comm_;
  const bool shared = config_.shared_expert_ffn > 0;
  const int64_t H = config_.hidden;
  LayerObserver* obs = run.observer;

  if (shared) {
    h.fork(h.fork_event, stream, h.side);
    layer::run_stage(LayerStage::kSharedExpert, h.side, obs, [&] {
      layer::shared_expert_forward(
          config_, x, w,
          {.offsets = v.shared_offsets, .pre = v.shared_pre, .act = v.shared_act, .y = v.shared_y},
          /*fused=*/true, h.side);
    });
  }
  layer::run_stage(LayerStage::kRouter, stream, obs, [&] {
    layer::route_tokens(h.cublas, config_, x, w, v, out.losses, run.health, stream);
  });
  layer::run_stage(LayerStage::kDispatch, stream, obs, [&] {
    layer::build_dispatch_maps(config_, v, run.health, stream);
  });
  layer::run_stage(LayerStage::kPermute, stream, obs, [&] {
    if (options_.fp8_dispatch)
      permute_quantize_fp8_records(x, v.row_of, v.token_of_row, records_view(v.xs), run.health,
                                   stream);
    else
      permute(x, v.row_of, v.token_of_row, v.xs, run.health, stream);
  });
  routed_experts(w, v, obs, stream);
  // The second stream's work of this pass (the shared expert, the copy of the received rows),
  // joined by the combine; none with FP8 dispatch and no shared expert.
  const bool side_work = shared || !options_.fp8_dispatch;
  if (side_work) MOEFUSE_CUDA_CHECK(cudaEventRecord(h.join, h.side));
  layer::run_stage(LayerStage::kCombine, stream, obs, [&] {
    // The shared expert's output is added inside the combine (as MoeLayer does, bit for bit).
    if (side_work) MOEFUSE_CUDA_CHECK(cudaStreamWaitEvent(stream, h.join, 0));
    combine_add(ep.returned(), v.probs, v.row_of, shared ? v.shared_y : TensorView{}, out.y,
                run.health, stream);
    // d_probs' operand, kept past this rank's next transfer (which overwrites returned()): the
    // R = T·k rows that hold outputs.
    MOEFUSE_CUDA_CHECK(cudaMemcpyAsync(v.ys_returned.data, ep.returned().data,
                                       size_t(p.rows * H) * sizeof(__nv_bfloat16),
                                       cudaMemcpyDeviceToDevice, stream));
  });
}

}  // namespace moefuse
