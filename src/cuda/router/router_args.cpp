#include "cuda/router/router_args.h"

#include <string>

#include "cuda/router/checks.h"
#include "moefuse/error.h"

namespace moefuse::cuda {

void check_router_options(const RouterOptions& options, int64_t top_k, int64_t num_experts) {
  expect_in_range(num_experts, "num_experts", 1, kRouterMaxExperts);
  expect_in_range(top_k, "top_k", 1, kRouterMaxTopK);
  MoeConfig c{.hidden = 1, .ffn = 1, .num_experts = num_experts, .top_k = top_k,
              .router = options};
  c.validate();
  const bool sigmoid = options.kind == RouterKind::kSigmoidGroupTopK;
  MOEFUSE_EXPECT(!options.use_score_bias || sigmoid, "config.router.use_score_bias",
                 "false with the softmax router (the bias is a sigmoid-router feature)", "true");
  if (sigmoid)
    MOEFUSE_EXPECT(options.num_groups <= kRouterMaxGroups, "config.router.num_groups",
                   "at most " + std::to_string(kRouterMaxGroups) + " groups on the GPU",
                   std::to_string(options.num_groups));
}

RouterShape check_router_topk(const RouterOptions& options, int64_t top_k,
                              const TensorView& logits, const TensorView& score_bias,
                              const RouterOutputs& out) {
  expect_device(logits, "logits", DType::kFloat32, {kAnyExtent, kAnyExtent});
  const int64_t T = logits.size(0), E = logits.size(1);
  expect_in_range(T, "logits.shape[0]", 0, INT32_MAX / kRouterMaxTopK);
  check_router_options(options, top_k, E);
  if (options.use_score_bias) {
    expect_device(score_bias, "score_bias", DType::kFloat32, {E});
  } else {
    MOEFUSE_EXPECT(is_absent(score_bias), "score_bias",
                   "an empty view (config.router.use_score_bias is false)",
                   "shape " + shape_string(score_bias));
  }
  expect_device(out.expert_idx, "expert_idx", DType::kInt32, {T, top_k});
  expect_device(out.probs, "probs", DType::kFloat32, {T, top_k});
  expect_device(out.counts, "counts", DType::kInt32, {E});
  expect_device(out.aux_f, "aux_f", DType::kFloat32, {E});
  expect_device(out.aux_P, "aux_P", DType::kFloat32, {E});
  expect_device(out.losses, "losses", DType::kFloat32, {2});
  return {.tokens = T, .experts = E};
}

RouterShape check_router_topk_backward(const RouterOptions& options, int64_t top_k,
                                       const TensorView& logits, const TensorView& expert_idx,
                                       const TensorView& counts, const TensorView& d_probs,
                                       const TensorView& loss_grads, const TensorView& d_logits) {
  expect_device(logits, "logits", DType::kFloat32, {kAnyExtent, kAnyExtent});
  const int64_t T = logits.size(0), E = logits.size(1);
  expect_in_range(T, "logits.shape[0]", 0, INT32_MAX / kRouterMaxTopK);
  check_router_options(options, top_k, E);
  expect_device(expert_idx, "expert_idx", DType::kInt32, {T, top_k});
  expect_device(counts, "counts", DType::kInt32, {E});
  expect_device(d_probs, "d_probs", DType::kFloat32, {T, top_k});
  if (!is_absent(loss_grads)) expect_device(loss_grads, "loss_grads", DType::kFloat32, {2});
  expect_device(d_logits, "d_logits", DType::kFloat32, {T, E});
  const NamedView outputs[] = {{d_logits, "d_logits"}};
  const NamedView inputs[] = {{loss_grads, "loss_grads"}};
  expect_outputs_disjoint(outputs, inputs);
  return {.tokens = T, .experts = E};
}

namespace {

// x [T, H] bf16 and w_router [E, H] bf16, the operands both GEMM directions share.
GemmShape check_gemm_operands(const TensorView& x, const TensorView& w_router) {
  expect_device(w_router, "w_router", DType::kBFloat16, {kAnyExtent, kAnyExtent});
  const int64_t E = w_router.size(0), H = w_router.size(1);
  expect_in_range(E, "w_router.shape[0]", 1, kRouterMaxExperts);
  expect_in_range(H, "w_router.shape[1]", 1, INT32_MAX);
  expect_device(x, "x", DType::kBFloat16, {kAnyExtent, H});
  const int64_t T = x.size(0);
  expect_in_range(T, "x.shape[0]", 0, INT32_MAX / kRouterMaxTopK);
  return {.tokens = T, .hidden = H, .experts = E};
}

}  // namespace

GemmShape check_router_logits(const TensorView& x, const TensorView& w_router,
                              const TensorView& logits) {
  const GemmShape s = check_gemm_operands(x, w_router);
  expect_device(logits, "logits", DType::kFloat32, {s.tokens, s.experts});
  return s;
}

GemmShape check_router_logits_backward(const TensorView& x, const TensorView& w_router,
                                       const TensorView& d_logits, const TensorView& dx,
                                       const TensorView& d_w_router) {
  const GemmShape s = check_gemm_operands(x, w_router);
  expect_device(d_logits, "d_logits", DType::kFloat32, {s.tokens, s.experts});
  if (!is_absent(dx)) expect_device(dx, "dx", DType::kBFloat16, {s.tokens, s.hidden});
  expect_device(d_w_router, "d_w_router", DType::kFloat32, {s.experts, s.hidden});
  return s;
}

}  // namespace moefuse::cuda
