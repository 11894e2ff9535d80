// MoeLayer: construction, sizes, names and the forward pass. The backward is in backward.cpp.
//
// Forward, main stream (fused mode):
//   router_logits → router_topk → dispatch_maps → scatter_row_prob
//   → FC1 (GLU + bias in the epilogue; saves pre), reading x through token_of_row itself, or,
//     for wide FC1s, a permuted copy xs made first (layer::fc1_gathers_x)
//   → FC2 (bias, row scale = routing prob in the epilogue) → combine (Σ_j, no weights; with a
//     shared expert, combine_add: + its output, joined from the second stream)
// Unfused mode: permute → FC1 plain GEMM → activation kernel → FC2 plain GEMM → bias kernel →
// combine weighted by the probs (the scaling pass). Second stream: the shared expert's MLP.
// FP8 (config.precision kFP8Blockwise, fused only): permute_quantize_fp8 (x → E4M3 xs + K-major
// 1x128 scales) → FC1 FP8 GEMM (GLU epilogue, bf16 act, saves pre) → act quantised 1x128, its scales
// transposed to K-major → FC2 FP8 GEMM (row scale = routing prob) → combine. Weights from
// weights.fp8 (prepare_fp8_weights). The shared expert likewise in FP8 (shared_expert_fp8.h);
// the router stays bf16.
// MXFP8 (config.precision kMXFP8, fused only; an emulation on Hopper, docs/fp8.md): the bf16
// fused path on quantise-dequantised operands — x along H (qdq_mxfp8_rows into x_qdq, which FC1
// gathers or the permute copies), act along F in place after FC1, w1 and w2 from weights.fp8.
#include <string>

#include "cuda/check.h"
#include "cuda/device.h"
#include "cuda/layer/forward_fp8.h"
#include "cuda/layer/fp8_mlp.h"
#include "cuda/layer/kernels.h"
#include "cuda/layer/layer_args.h"
#include "cuda/layer/layer_handles.h"
#include "cuda/layer/mxfp8_weights.h"
#include "cuda/layer/ops.h"
#include "cuda/layer/plan.h"
#include "cuda/layer/routing.h"
#include "cuda/layer/shared_expert.h"
#include "cuda/layer/stage.h"
#include "cuda/layer/views.h"
#include "moefuse/dispatch.h"
#include "moefuse/error.h"
#include "moefuse/grouped_gemm.h"
#include "moefuse/layer.h"
#include "moefuse/quant.h"
#include "moefuse/router.h"

// Designated initialisers leave the optional views (bias, row_scale, ...) empty on purpose.
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"

namespace moefuse {

std::string_view layer_mode_name(LayerMode m) {
  return m == LayerMode::kFused ? "fused" : "unfused";
}

std::string_view layer_stage_name(LayerStage s) {
  switch (s) {
    case LayerStage::kRouter:
      return "router";
    case LayerStage::kDispatch:
      return "dispatch";
    case LayerStage::kPermute:
      return "permute";
    case LayerStage::kEpDispatch:
      return "ep_dispatch";
    case LayerStage::kEpDecode:
      return "ep_decode";
    case LayerStage::kFc1:
      return "fc1";
    case LayerStage::kFc2:
      return "fc2";
    case LayerStage::kEpReturn:
      return "ep_return";
    case LayerStage::kCombine:
      return "combine";
    case LayerStage::kSharedExpert:
      return "shared_expert";
    case LayerStage::kRecomputeFc1:
      return "recompute_fc1";
    case LayerStage::kCombineBackward:
      return "combine_bwd";
    case LayerStage::kEpDispatchBackward:
      return "ep_dispatch_bwd";
    case LayerStage::kFc2Dgrad:
      return "fc2_dgrad";
    case LayerStage::kFc1Dgrad:
      return "fc1_dgrad";
    case LayerStage::kEpReturnBackward:
      return "ep_return_bwd";
    case LayerStage::kPermuteBackward:
      return "permute_bwd";
    case LayerStage::kRouterBackward:
      return "router_bwd";
    case LayerStage::kFc2Wgrad:
      return "fc2_wgrad";
    case LayerStage::kFc1Wgrad:
      return "fc1_wgrad";
    case LayerStage::kSharedExpertBackward:
      return "shared_expert_bwd";
    case LayerStage::kCount:
      break;
  }
  return "unknown";
}

bool layer_stage_is_backward(LayerStage s) {
  return static_cast<int>(s) >= static_cast<int>(LayerStage::kRecomputeFc1) &&
         s != LayerStage::kCount;
}

LayerMemoryPlan layer_memory_plan(const MoeConfig& config, const LayerOptions& options,
                                  int64_t tokens) {
  layer::check_layer_config(config);
  layer::check_layer_options(config, options);
  MOEFUSE_EXPECT(tokens >= 1, "tokens", "at least 1", std::to_string(tokens));
  layer::Plan p = layer::make_plan(config, options, tokens);
  return {.buffers = std::move(p.buffers),
          .cache_bytes = p.cache_bytes,
          .workspace_bytes = p.workspace_bytes,
          .fp8_weight_bytes = p.fp8_weight_bytes};
}

MoeLayer::MoeLayer(const MoeConfig& config, const LayerOptions& options)
    : config_(config), options_(options) {
  layer::check_layer_config(config_);
  layer::check_layer_options(config_, options_);
  handles_ = std::make_unique<layer::LayerHandles>();
}

MoeLayer::~MoeLayer() = default;

size_t MoeLayer::cache_size(int64_t max_tokens) const {
  return layer_memory_plan(config_, options_, max_tokens).cache_bytes;
}

size_t MoeLayer::workspace_size(int64_t max_tokens) const {
  return layer_memory_plan(config_, options_, max_tokens).workspace_bytes;
}

size_t MoeLayer::fp8_weight_size() const {
  return layer_memory_plan(config_, options_, 1).fp8_weight_bytes;
}

void MoeLayer::prepare_fp8_weights(const MoeLayerWeights& w, cudaStream_t stream) {
  layer::check_fp8_weights(config_, w);
  handles_->expect_launchable_here(stream, "MoeLayer");
  const layer::Plan p = layer::make_plan(config_, options_, 1);
  const layer::Views v =
      layer::make_views(config_, p, {.cache = {}, .workspace = {}, .fp8 = w.fp8});
  if (config_.precision == PrecisionRecipe::kMXFP8)
    return layer::prepare_mxfp8_weights(w, v, stream);
  layer::prepare_fp8_mlp_weights(w.w1, w.w2, v.fp8_weights, stream);
  if (config_.shared_expert_ffn > 0)  // the shared expert as one expert [1, ...]
    layer::prepare_fp8_mlp_weights(layer::one_expert(w.shared_w1), layer::one_expert(w.shared_w2),
                                   v.shared_fp8.weights, stream);
}

void MoeLayer::forward(const TensorView& x, const MoeLayerWeights& w, const MoeLayerOutputs& out,
                       Workspace cache, Workspace workspace, cudaStream_t stream,
                       const LayerRun& run) {
  const int64_t T =
      layer::check_layer_forward(config_, options_, x, w, out, cache, workspace, run.health);
  handles_->expect_launchable_here(stream, "MoeLayer");
  const layer::Plan p = layer::make_plan(config_, options_, T);
  const layer::Views v =
      layer::make_views(config_, p, {.cache = cache, .workspace = workspace, .fp8 = w.fp8});
  const bool fused = options_.mode == LayerMode::kFused;
  const bool fp8 = config_.precision == PrecisionRecipe::kFP8Blockwise;
  const bool shared = config_.shared_expert_ffn > 0;
  const int64_t k = config_.top_k;
  LayerObserver* obs = run.observer;
  layer::LayerHandles& h = *handles_;

  if (shared) {
    h.fork(h.fork_event, stream, h.side);
    layer::run_stage(LayerStage::kSharedExpert, h.side, obs, [&] {
      layer::shared_expert_forward(config_, x, w,
                                   {.offsets = v.shared_offsets,
                                    .pre = v.shared_pre,
                                    .act = v.shared_act,
                                    .y = v.shared_y,
                                    .fp8 = v.shared_fp8},
                                   fused, h.side);
    });
    MOEFUSE_CUDA_CHECK(cudaEventRecord(h.join, h.side));
  }

  layer::run_stage(LayerStage::kRouter, stream, obs, [&] {
    layer::route_tokens(h.cublas, config_, x, w, v, out.losses, run.health, stream);
  });
  layer::run_stage(LayerStage::kDispatch, stream, obs, [&] {
    layer::build_dispatch_maps(config_, v, run.health, stream);
    // Both modes: the backward's FC2 dgrad takes the probability per row.
    layer::scatter_row_prob(v.probs.as<float>(), v.row_of.as<int32_t>(), v.row_prob.as<float>(),
                            T * k, p.rows, stream);
  });
  if (fp8) {
    layer::routed_experts_fp8(config_, x, w, v, run, stream);
  } else {
    // MXFP8: FC1 reads x and w1, FC2 act and w2, quantise-dequantised along their K.
    const bool mx = config_.precision == PrecisionRecipe::kMXFP8;
    const bool gather = layer::fc1_gathers_x(config_, options_);
    const TensorView& x_in = mx ? v.x_qdq : x;
    if (mx || !gather) {
      layer::run_stage(LayerStage::kPermute, stream, obs, [&] {
        if (mx) qdq_mxfp8_rows(x, v.x_qdq, stream);
        if (!gather) permute(x_in, v.row_of, v.token_of_row, v.xs, run.health, stream);
      });
    }
    layer::run_stage(LayerStage::kFc1, stream, obs, [&] {
      layer::run_grouped_gemm({.a = gather ? x_in : v.xs,
                               .b = mx ? v.w1_qdq : w.w1,
                               .offsets = v.offsets,
                               .d = v.act,
                               .epilogue = GemmEpilogue::kActivation,
                               .activation = config_.activation,
                               .clamped_swiglu = config_.clamped_swiglu,
                               .bias = w.b1,
                               .pre_activation = v.pre,
                               .gather_index = gather ? v.token_of_row : TensorView{}},
                              fused, stream);
      if (mx) qdq_mxfp8_rows(v.act, v.act, stream);
    });
    layer::run_stage(LayerStage::kFc2, stream, obs, [&] {
      layer::run_grouped_gemm({.a = v.act,
                               .b = mx ? v.w2_qdq : w.w2,
                               .offsets = v.offsets,
                               .d = v.ys,
                               .bias = w.b2,
                               .row_scale = fused ? v.row_prob : TensorView{}},
                              fused, stream);
    });
  }
  layer::run_stage(LayerStage::kCombine, stream, obs, [&] {
    // The shared expert's output is added inside the combine (one pass over [T, H]).
    if (shared) MOEFUSE_CUDA_CHECK(cudaStreamWaitEvent(stream, h.join, 0));
    combine_add(v.ys, fused ? TensorView{} : v.probs, v.row_of,
                shared ? v.shared_y : TensorView{}, out.y, run.health, stream);
  });
}

}  // namespace moefuse
