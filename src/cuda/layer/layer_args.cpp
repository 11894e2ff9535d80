#include "cuda/layer/layer_args.h"

#include <climits>
#include <string>
#include <vector>

#include "cuda/layer/ops.h"
#include "cuda/layer/plan.h"
#include "cuda/router/checks.h"
#include "cuda/router/router_args.h"
#include "moefuse/dispatch.h"
#include "moefuse/error.h"
#include "moefuse/grouped_gemm.h"
#include "moefuse/router.h"

namespace moefuse::layer {
namespace {

// A device tensor of `dtype`/`shape`, 16-byte aligned (TMA and vector loads).
void expect_device_aligned(const TensorView& t, std::string_view name, DType dtype,
                           std::initializer_list<int64_t> shape) {
  expect_tensor(t, name, dtype, Device::kCuda, shape);
  expect_aligned(t, name);
}

// An expert weight gradient (d_w1, d_w2): fp32, or bf16. The wgrads (BF16 and FP8) sum all of
// an expert's rows in fp32 and round once, as torch's bf16 weight gradients are.
void expect_expert_grad(const TensorView& t, std::string_view name,
                        std::initializer_list<int64_t> shape) {
  MOEFUSE_EXPECT(t.dtype == DType::kFloat32 || t.dtype == DType::kBFloat16, name, "fp32 or bf16",
                 std::string(dtype_name(t.dtype)));
  expect_device_aligned(t, name, t.dtype, shape);
}

// Present exactly when `required`; `why` says what makes it absent.
void expect_optional(const TensorView& t, std::string_view name, bool required,
                     std::string_view why, DType dtype, std::initializer_list<int64_t> shape) {
  if (required) {
    expect_device_aligned(t, name, dtype, shape);
    return;
  }
  MOEFUSE_EXPECT(is_absent(t), name, "an empty view (" + std::string(why) + ")",
                 "shape " + shape_string(t));
}

void expect_region(const Workspace& w, std::string_view name, size_t needed) {
  MOEFUSE_EXPECT(w.bytes >= needed, name, "at least " + std::to_string(needed) + " bytes",
                 std::to_string(w.bytes) + " bytes");
  const bool aligned = reinterpret_cast<uintptr_t>(w.data) % 256 == 0;
  MOEFUSE_EXPECT(needed == 0 || (w.data != nullptr && aligned), name,
                 "a non-null, 256-byte aligned pointer",
                 w.data ? "a misaligned pointer" : "nullptr");
}

// A workspace region as a byte view, for expect_disjoint.
TensorView region_view(const Workspace& w) {
  return TensorView::contiguous(w.data, DType::kFloat8E8M0, {static_cast<int64_t>(w.bytes)},
                                Device::kCuda);
}

// The inputs of a layer call: `extra` and the weights every forward and backward reads.
std::vector<NamedView> layer_inputs(std::initializer_list<NamedView> extra, const MoeLayerWeights& w) {
  std::vector<NamedView> in(extra);
  in.insert(in.end(), {{w.w_router, "weights.w_router"},   {w.score_bias, "weights.score_bias"},
                       {w.w1, "weights.w1"},               {w.b1, "weights.b1"},
                       {w.w2, "weights.w2"},               {w.b2, "weights.b2"},
                       {w.shared_w1, "weights.shared_w1"}, {w.shared_w2, "weights.shared_w2"},
                       {region_view(w.fp8), "weights.fp8"}});
  return in;
}

void expect_multiple_of_8(int64_t v, std::string_view name) {
  MOEFUSE_EXPECT(v % 8 == 0, name, "a multiple of 8 (16-byte bf16 rows)", std::to_string(v));
}

void expect_multiple_of_16_fp8(int64_t v, std::string_view name) {
  MOEFUSE_EXPECT(v % 16 == 0, name, "a multiple of 16 with fp8_blockwise (16-byte e4m3 rows)",
                 std::to_string(v));
}

void expect_multiple_of_32_mxfp8(int64_t v, std::string_view name) {
  MOEFUSE_EXPECT(v % 32 == 0, name, "a multiple of 32 with mxfp8 (whole 32-element blocks)",
                 std::to_string(v));
}

// The recipes with a quantised weight copy in MoeLayerWeights::fp8.
bool has_weight_copy(const MoeConfig& c) { return c.precision != PrecisionRecipe::kBF16; }

// x [T, H]; returns T.
int64_t check_x(const MoeConfig& c, const TensorView& x, int64_t max_tokens) {
  MOEFUSE_EXPECT(x.rank == 2, "x", "rank 2 [T, H]", "rank " + std::to_string(x.rank));
  const int64_t T = x.size(0);
  MOEFUSE_EXPECT(T >= 1 && T <= max_tokens, "x",
                 "T (dim 0) in [1, " + std::to_string(max_tokens) + "] tokens",
                 std::to_string(T));
  expect_device_aligned(x, "x", DType::kBFloat16, {T, c.hidden});
  return T;
}

// E: the experts whose weights w holds (the router's are always all of them).
void check_weights(const MoeConfig& c, int64_t E, const MoeLayerWeights& w) {
  const int64_t H = c.hidden, F = c.ffn, fc1 = c.fc1_width();
  const bool shared = c.shared_expert_ffn > 0;
  const MoeConfig sc = shared_expert_config(c);
  expect_device_aligned(w.w_router, "weights.w_router", DType::kBFloat16, {c.num_experts, H});
  expect_optional(w.score_bias, "weights.score_bias", c.router.use_score_bias,
                  "config.router.use_score_bias is false", DType::kFloat32, {c.num_experts});
  expect_device_aligned(w.w1, "weights.w1", DType::kBFloat16, {E, fc1, H});
  expect_device_aligned(w.w2, "weights.w2", DType::kBFloat16, {E, H, F});
  const char* no_bias = "config.expert_bias is false";
  expect_optional(w.b1, "weights.b1", c.expert_bias, no_bias, DType::kFloat32, {E, fc1});
  expect_optional(w.b2, "weights.b2", c.expert_bias, no_bias, DType::kFloat32, {E, H});
  const char* no_shared = "config.shared_expert_ffn is 0";
  expect_optional(w.shared_w1, "weights.shared_w1", shared, no_shared, DType::kBFloat16,
                  {sc.fc1_width(), H});
  expect_optional(w.shared_w2, "weights.shared_w2", shared, no_shared, DType::kBFloat16,
                  {H, sc.ffn});
}

}  // namespace

void check_layer_config(const MoeConfig& c) {
  c.validate();
  MOEFUSE_EXPECT(c.precision == PrecisionRecipe::kBF16 ||
                     c.precision == PrecisionRecipe::kFP8Blockwise ||
                     c.precision == PrecisionRecipe::kMXFP8,
                 "config.precision", "bf16, fp8_blockwise or mxfp8",
                 std::string(precision_name(c.precision)));
  expect_multiple_of_8(c.hidden, "config.hidden");
  expect_multiple_of_8(c.ffn, "config.ffn");
  if (c.precision == PrecisionRecipe::kFP8Blockwise) {
    // K of FC1 (H) and of FC2 (F) is the row length of e4m3 operands: 16-byte TMA rows.
    expect_multiple_of_16_fp8(c.hidden, "config.hidden");
    expect_multiple_of_16_fp8(c.ffn, "config.ffn");
    // The shared expert runs the same FP8 GEMMs (its F is FC2's K).
    expect_multiple_of_16_fp8(c.shared_expert_ffn, "config.shared_expert_ffn");
  }
  if (c.precision == PrecisionRecipe::kMXFP8) {
    // Every GEMM's K (H, F, fc1 = F or 2F) and the weights' rows split into whole 32-blocks.
    expect_multiple_of_32_mxfp8(c.hidden, "config.hidden");
    expect_multiple_of_32_mxfp8(c.ffn, "config.ffn");
  }
  expect_multiple_of_8(c.shared_expert_ffn, "config.shared_expert_ffn");
  MOEFUSE_EXPECT(c.num_experts <= kRouterMaxExperts, "config.num_experts",
                 "at most " + std::to_string(kRouterMaxExperts) + " (GPU router)",
                 std::to_string(c.num_experts));
  MOEFUSE_EXPECT(c.top_k <= kRouterMaxTopK, "config.top_k",
                 "at most " + std::to_string(kRouterMaxTopK) + " (GPU router)",
                 std::to_string(c.top_k));
  cuda::check_router_options(c.router, c.top_k, c.num_experts);
}

void check_layer_options(const MoeConfig& c, const LayerOptions& o) {
  MOEFUSE_EXPECT(o.mode == LayerMode::kFused || o.mode == LayerMode::kUnfused, "options.mode",
                 "kFused or kUnfused", std::to_string(static_cast<int>(o.mode)));
  MOEFUSE_EXPECT(c.precision == PrecisionRecipe::kBF16 || o.mode == LayerMode::kFused,
                 "options.mode",
                 "kFused with " + std::string(precision_name(c.precision)) +
                     " (no unfused low-precision path)",
                 std::string(layer_mode_name(o.mode)));
}

void check_fp8_weights(const MoeConfig& c, const MoeLayerWeights& w) {
  MOEFUSE_EXPECT(has_weight_copy(c), "config.precision",
                 "fp8_blockwise or mxfp8 (only they have a quantised weight copy)",
                 std::string(precision_name(c.precision)));
  const int64_t E = c.num_experts, H = c.hidden, F = c.ffn, fc1 = c.fc1_width();
  expect_device_aligned(w.w1, "weights.w1", DType::kBFloat16, {E, fc1, H});
  expect_device_aligned(w.w2, "weights.w2", DType::kBFloat16, {E, H, F});
  expect_region(w.fp8, "weights.fp8", make_plan(c, {}, 1).fp8_weight_bytes);
  expect_disjoint(region_view(w.fp8), "weights.fp8", w.w1, "weights.w1");
  expect_disjoint(region_view(w.fp8), "weights.fp8", w.w2, "weights.w2");
  if (c.precision == PrecisionRecipe::kFP8Blockwise && c.shared_expert_ffn > 0) {
    // FP8 quantises the shared expert's weights into the region too (shared_expert_fp8.h).
    const MoeConfig sc = shared_expert_config(c);
    expect_device_aligned(w.shared_w1, "weights.shared_w1", DType::kBFloat16,
                          {sc.fc1_width(), H});
    expect_device_aligned(w.shared_w2, "weights.shared_w2", DType::kBFloat16, {H, sc.ffn});
    expect_disjoint(region_view(w.fp8), "weights.fp8", w.shared_w1, "weights.shared_w1");
    expect_disjoint(region_view(w.fp8), "weights.fp8", w.shared_w2, "weights.shared_w2");
  }
}

ArgBounds one_gpu_bounds(const MoeConfig& c, const LayerOptions& o) {
  return {.experts_held = c.num_experts,
          .max_tokens = INT32_MAX / c.top_k,
          .region_bytes = [c, o](int64_t tokens) {
            const Plan p = make_plan(c, o, tokens);
            return RegionBytes{.cache = p.cache_bytes, .workspace = p.workspace_bytes};
          }};
}

int64_t check_layer_forward(const MoeConfig& c, const LayerOptions& o, const TensorView& x,
                            const MoeLayerWeights& w, const MoeLayerOutputs& out,
                            const Workspace& cache, const Workspace& workspace,
                            const TensorView& health) {
  return check_forward_args(c, one_gpu_bounds(c, o), x, w, out, cache, workspace, health);
}

int64_t check_layer_backward(const MoeConfig& c, const LayerOptions& o, const TensorView& x,
                             const TensorView& dy, const MoeLayerWeights& w,
                             const MoeLayerGrads& g, const Workspace& cache,
                             const Workspace& workspace, const TensorView& health) {
  return check_backward_args(c, one_gpu_bounds(c, o), x, dy, w, g, cache, workspace, health);
}

int64_t check_forward_args(const MoeConfig& c, const ArgBounds& b, const TensorView& x,
                           const MoeLayerWeights& w, const MoeLayerOutputs& out,
                           const Workspace& cache, const Workspace& workspace,
                           const TensorView& health) {
  const int64_t T = check_x(c, x, b.max_tokens);
  check_weights(c, b.experts_held, w);
  if (has_weight_copy(c)) check_fp8_weights(c, w);
  expect_device_aligned(out.y, "out.y", DType::kBFloat16, {T, c.hidden});
  expect_tensor(out.losses, "out.losses", DType::kFloat32, Device::kCuda, {2});
  const RegionBytes needed = b.region_bytes(T);
  expect_region(cache, "cache", needed.cache);
  expect_region(workspace, "workspace", needed.workspace);
  cuda::expect_health(health);
  // The stages write outputs while other CTAs and the side stream still read the inputs.
  const NamedView outputs[] = {{out.y, "out.y"},
                               {out.losses, "out.losses"},
                               {region_view(cache), "cache"},
                               {region_view(workspace), "workspace"},
                               {health, "health"}};
  expect_outputs_disjoint(outputs, layer_inputs({{x, "x"}}, w));
  return T;
}

int64_t check_backward_args(const MoeConfig& c, const ArgBounds& b, const TensorView& x,
                            const TensorView& dy, const MoeLayerWeights& w,
                            const MoeLayerGrads& g, const Workspace& cache,
                            const Workspace& workspace, const TensorView& health) {
  const int64_t T = check_x(c, x, b.max_tokens);
  const int64_t E = b.experts_held, H = c.hidden, F = c.ffn, fc1 = c.fc1_width();
  check_weights(c, E, w);
  // The low-precision backward's GEMMs read the quantised copy (the recompute's and the dgrads').
  if (has_weight_copy(c)) check_fp8_weights(c, w);
  expect_device_aligned(dy, "dy", DType::kBFloat16, {T, H});
  expect_device_aligned(g.dx, "grads.dx", DType::kBFloat16, {T, H});
  expect_device_aligned(g.d_w_router, "grads.d_w_router", DType::kFloat32,
                        {c.num_experts, H});
  expect_expert_grad(g.d_w1, "grads.d_w1", {E, fc1, H});
  expect_expert_grad(g.d_w2, "grads.d_w2", {E, H, F});
  if (g.accumulate) {  // the running sum stays fp32 (a bf16 one would round every micro-batch)
    MOEFUSE_EXPECT(g.d_w1.dtype == DType::kFloat32, "grads.d_w1",
                   "fp32 with grads.accumulate", std::string(dtype_name(g.d_w1.dtype)));
    MOEFUSE_EXPECT(g.d_w2.dtype == DType::kFloat32, "grads.d_w2",
                   "fp32 with grads.accumulate", std::string(dtype_name(g.d_w2.dtype)));
  }
  const char* no_bias = "config.expert_bias is false";
  expect_optional(g.d_b1, "grads.d_b1", c.expert_bias, no_bias, DType::kFloat32, {E, fc1});
  expect_optional(g.d_b2, "grads.d_b2", c.expert_bias, no_bias, DType::kFloat32, {E, H});
  const bool shared = c.shared_expert_ffn > 0;
  const MoeConfig sc = shared_expert_config(c);
  const char* no_shared = "config.shared_expert_ffn is 0";
  expect_optional(g.d_shared_w1, "grads.d_shared_w1", shared, no_shared, DType::kFloat32,
                  {sc.fc1_width(), H});
  expect_optional(g.d_shared_w2, "grads.d_shared_w2", shared, no_shared, DType::kFloat32,
                  {H, sc.ffn});
  if (!is_absent(g.loss_grads))
    expect_device_aligned(g.loss_grads, "grads.loss_grads", DType::kFloat32, {2});
  const RegionBytes needed = b.region_bytes(T);
  expect_region(cache, "cache", needed.cache);
  expect_region(workspace, "workspace", needed.workspace);
  cuda::expect_health(health);
  const NamedView outputs[] = {{g.dx, "grads.dx"},
                               {g.d_w_router, "grads.d_w_router"},
                               {g.d_w1, "grads.d_w1"},
                               {g.d_b1, "grads.d_b1"},
                               {g.d_w2, "grads.d_w2"},
                               {g.d_b2, "grads.d_b2"},
                               {g.d_shared_w1, "grads.d_shared_w1"},
                               {g.d_shared_w2, "grads.d_shared_w2"},
                               {region_view(workspace), "workspace"},
                               {health, "health"}};
  expect_outputs_disjoint(outputs, layer_inputs({{x, "x"},
                                                {dy, "dy"},
                                                {region_view(cache), "cache"},
                                                {g.loss_grads, "grads.loss_grads"}},
                                               w));
  return T;
}

}  // namespace moefuse::layer
