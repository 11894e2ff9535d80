// One MoE layer on the GPU, forward and backward, sync-free and capturable as one CUDA graph.
//
//   x [T,H] ─router─▶ idx, probs ─dispatch─▶ maps ─FC1 (+GLU)─▶ act ─FC2 (· prob)─▶ ys ─combine─▶ y
//   y += shared_expert(x)  (a dense MLP through the same grouped GEMM, on a second stream)
//
// Memory is the caller's, in two regions sized by the layer (docs/layer.md has the plan):
// - the cache [cache_size(T) bytes]: what forward leaves for backward. Keep one per layer between
//   a layer's forward and its backward. It holds the routing metadata (logits, idx, probs, maps,
//   the per-row probabilities) and FC1's pre-activation (unless options.recompute_pre). Never the
//   permuted x, FC2's output or dY. x itself stays the caller's tensor: pass it to backward again.
// - the workspace [workspace_size(T) bytes]: scratch of one call, reusable by the next layer.
// Both 256-byte aligned (cudaMalloc's pointers are).
//
// Every call validates its arguments first (InvalidArgument names the bad one), then enqueues
// work on `stream` (and on the layer's second stream, joined back before the call returns)
// without allocating, synchronising or reading device memory on the host: forward and backward
// can be captured together in one CUDA graph and replayed on new data in the same buffers.
// Results are bitwise repeatable (no floating-point atomics anywhere on the path).
//
// Dtypes: activations, weights and dx are bf16; biases, routing probabilities, losses and every
// gradient except dx are fp32. GLU expert weights (w1, b1, shared_w1) use the grouped GEMM's
// interleaved layout: convert a [gate; up] weight with interleave_glu_weight (grouped_gemm.h);
// gradients of interleaved weights come back interleaved (deinterleave_glu_weight converts them).
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "moefuse/config.h"
#include "moefuse/grouped_gemm.h"
#include "moefuse/tensor.h"
#include "moefuse/workspace.h"

namespace moefuse {

namespace layer {
class LayerHandles;
}

enum class LayerMode : uint8_t {
  kFused,    // gather in FC1's loads, GLU + pre-activation in FC1's epilogue, prob in FC2's
  kUnfused,  // every op its own kernel: permute, plain GEMMs, activation and scaling passes
};
std::string_view layer_mode_name(LayerMode m);

struct LayerOptions {
  LayerMode mode = LayerMode::kFused;
  // Backward recomputes FC1's pre-activation (one more FC1 GEMM) instead of reading it from the
  // cache: the cache shrinks to x-sized metadata. With config.precision kFP8Blockwise the
  // recompute is an FP8 FC1 GEMM from re-quantised x (the same codes: the same pre, bit for bit).
  bool recompute_pre = false;
};

// Stages of the layer, each wrapped in an NVTX range of its name and reported to an observer.
enum class LayerStage : uint8_t {
  kRouter,              // logits GEMM + fused top-k, aux/z statistics
  kDispatch,            // offsets, row maps, per-row probabilities
  kPermute,             // x → xs, the rows FC1 reads (absent where a narrow bf16 FC1 gathers)
  kEpDispatch,          // expert parallelism: xs rows to their experts' ranks (EpMoeLayer only)
  kEpDecode,            // expert parallelism, FP8 dispatch: received records → bf16 rows
  kFc1,                 // FC1 grouped GEMM (+ activation)
  kFc2,                 // FC2 grouped GEMM (+ prob scale)
  kEpReturn,            // expert parallelism: expert outputs back to their tokens' ranks
  kCombine,             // Σ_j over a token's rows (+ shared expert's output)
  kSharedExpert,        // the shared expert's MLP (second stream)
  kRecomputeFc1,        // backward with recompute_pre: FC1 again, pre-activation only
  kCombineBackward,
  kEpDispatchBackward,  // expert parallelism: dys rows to their experts' ranks
  kFc2Dgrad,            // d act (+ dGLU → d pre, + d prob)
  kFc1Dgrad,            // d xs
  kEpReturnBackward,    // expert parallelism: dxs rows back to their tokens' ranks
  kPermuteBackward,     // d x = Σ_j d xs
  kRouterBackward,      // d probs → d logits (+ aux, z) → d x +=, d w_router
  kFc2Wgrad,            // d w2 (+ d b2)   (EpMoeLayer: second stream, beside the returns)
  kFc1Wgrad,            // d w1 (+ d b1)   (EpMoeLayer: second stream)
  kSharedExpertBackward,
  kCount
};
std::string_view layer_stage_name(LayerStage s);
bool layer_stage_is_backward(LayerStage s);

// Told where each stage starts and ends, on the stream that runs it (the benchmark records CUDA
// events here). Called on the host while enqueueing; it must only enqueue work.
class LayerObserver {
 public:
  virtual ~LayerObserver() = default;
  virtual void begin(LayerStage stage, cudaStream_t stream) = 0;
  virtual void end(LayerStage stage, cudaStream_t stream) = 0;
};

// Caller-provided device views. Experts stacked along dim 0.
struct MoeLayerWeights {
  TensorView w_router;    // [E, H] bf16
  TensorView score_bias;  // [E] fp32 when config.router.use_score_bias, else empty
  TensorView w1;          // [E, fc1, H] bf16 (GLU: interleaved)
  TensorView b1;          // [E, fc1] fp32 (GLU: interleaved) when config.expert_bias, else empty
  TensorView w2;          // [E, H, F] bf16
  TensorView b2;          // [E, H] fp32 when config.expert_bias, else empty
  TensorView shared_w1;   // [shared_fc1, H] bf16 (GLU: interleaved) when shared_expert_ffn > 0
  TensorView shared_w2;   // [H, shared_F] bf16 when shared_expert_ffn > 0
  // config.precision kFP8Blockwise: the FP8 copy of w1 and w2 (and of shared_w1, shared_w2) and
  // of their transposes (the dgrads' K-major operands); kMXFP8: w1 and w2 quantise-dequantised
  // along each GEMM's K, four bf16 copies. fp8_weight_size() bytes, 256-byte aligned, that
  // prepare_fp8_weights wrote from the bf16 weights above; forward and backward read it.
  // Ignored (may be empty) with kBF16.
  Workspace fp8;
};

// Gradients of <y, dy> + aux_loss + z_loss, same shapes as the weights (and x). Overwritten.
// d_w1 and d_w2 may be bf16 (any precision), each on its own: the wgrad (BF16 or FP8) sums an
// expert's rows in fp32 and rounds once, so the bf16 gradient is the fp32 one rounded, as
// torch's bf16 weight gradients are, for half the bytes written and none to convert.
struct MoeLayerGrads {
  TensorView dx;           // [T, H] bf16
  TensorView d_w_router;   // [E, H] fp32
  TensorView d_w1;         // [E, fc1, H] fp32 or bf16 (interleaved like w1)
  TensorView d_b1;         // [E, fc1] fp32 when config.expert_bias, else empty
  TensorView d_w2;         // [E, H, F] fp32 or bf16
  TensorView d_b2;         // [E, H] fp32 when config.expert_bias, else empty
  TensorView d_shared_w1;  // [shared_fc1, H] fp32 when shared_expert_ffn > 0
  TensorView d_shared_w2;  // [H, shared_F] fp32 when shared_expert_ffn > 0
  // An input: the losses' upstream gradient ∂L/∂{aux_loss, z_loss}, [2] fp32 in device memory,
  // read by backward's router kernel on the device (autograd's, which is 0 for a loss the caller
  // never used); empty: both 1, each loss entering the total with weight 1.
  TensorView loss_grads;
  // Main-grad accumulation (Megatron's gradient-accumulation fusion): every weight gradient
  // (all but dx) is fp32 and backward adds the step's gradient to it, old + new rounded once per
  // element, instead of overwriting it; the wgrads add in their epilogues, so the fp32 gradients
  // of several micro-batches sum with no extra pass. An expert with no rows leaves its d_w1 and
  // d_w2 bit for bit.
  bool accumulate = false;
};

// A layer's weights and gradients as raw device pointers (nullptr: absent), for callers holding
// plain buffers (the C ABI, benchmarks, tests). layer_weight_views / layer_grad_views shape them
// as the config says; whether an absent one is allowed is forward's and backward's to check.
struct MoeLayerWeightPointers {
  const void* w_router = nullptr;
  const float* score_bias = nullptr;
  const void* w1 = nullptr;
  const float* b1 = nullptr;
  const void* w2 = nullptr;
  const float* b2 = nullptr;
  const void* shared_w1 = nullptr;
  const void* shared_w2 = nullptr;
  void* fp8 = nullptr;  // MoeLayerWeights::fp8, with its size
  size_t fp8_bytes = 0;
};
// experts_held: the experts whose weights (and gradients) the pointers hold, 0 for all E;
// EpMoeLayer's callers pass their rank's El (the router's are all E either way).
MoeLayerWeights layer_weight_views(const MoeConfig& config, const MoeLayerWeightPointers& p,
                                   int64_t experts_held = 0);

struct MoeLayerGradPointers {
  void* dx = nullptr;
  float* d_w_router = nullptr;
  void* d_w1 = nullptr;  // of dtype expert_grads
  float* d_b1 = nullptr;
  void* d_w2 = nullptr;  // of dtype expert_grads
  float* d_b2 = nullptr;
  float* d_shared_w1 = nullptr;
  float* d_shared_w2 = nullptr;
  DType expert_grads = DType::kFloat32;  // d_w1 and d_w2: kFloat32 or kBFloat16
  const float* loss_grads = nullptr;     // MoeLayerGrads::loss_grads (an input)
  bool accumulate = false;               // MoeLayerGrads::accumulate
};
MoeLayerGrads layer_grad_views(const MoeConfig& config, int64_t tokens,
                               const MoeLayerGradPointers& p, int64_t experts_held = 0);

struct MoeLayerOutputs {
  TensorView y;       // [T, H] bf16
  TensorView losses;  // [2] fp32 device scalars {aux_loss, z_loss}, coefficients included;
                      // backward adds their gradients times MoeLayerGrads::loss_grads (1 and 1
                      // when that is empty)
};

// Optional per-call extras.
struct LayerRun {
  LayerObserver* observer = nullptr;  // stage boundaries (benchmark); nullptr: none
  TensorView health;                  // [1] int32 device flag (moefuse/health.h) or empty
};

// Where a buffer of the memory plan lives. The forward and backward parts of the workspace
// start at the same offset (after the part both use): a step runs them one after the other.
enum class LayerRegion : uint8_t {
  kCache,              // written by forward, read by backward; keep one per layer
  kWorkspaceBoth,      // scratch used by forward and by backward
  kWorkspaceForward,   // scratch of forward only
  kWorkspaceBackward,  // scratch of backward only
  kFp8Weights,         // FP8 / MXFP8: the quantised weights (MoeLayerWeights::fp8), per step
};

// One buffer of the memory plan, for reports and docs.
struct LayerBuffer {
  std::string name;
  LayerRegion region;
  size_t offset;  // bytes from its region's start (the cache's or the workspace's)
  size_t bytes;
};

struct LayerMemoryPlan {
  std::vector<LayerBuffer> buffers;
  size_t cache_bytes = 0;
  size_t workspace_bytes = 0;
  size_t fp8_weight_bytes = 0;  // 0 with kBF16; independent of T
};

// The plan for T tokens; sizes depend only on (config, options, T). No CUDA call.
LayerMemoryPlan layer_memory_plan(const MoeConfig& config, const LayerOptions& options,
                                  int64_t tokens);

class MoeLayer {
 public:
  // Validates the config and options (InvalidArgument naming the field: precision kBF16,
  // kFP8Blockwise or kMXFP8; FP8 needs kFused, H and F multiples of 16, MXFP8 kFused and
  // multiples of 32), then creates
  // the cuBLAS handle, the second stream and its fork/join events on the current device, which
  // becomes the layer's: forward, backward and prepare_fp8_weights throw InvalidArgument naming
  // "current device" when called with another device current. Not capturable.
  explicit MoeLayer(const MoeConfig& config, const LayerOptions& options = {});
  ~MoeLayer();
  MoeLayer(const MoeLayer&) = delete;
  MoeLayer& operator=(const MoeLayer&) = delete;

  const MoeConfig& config() const { return config_; }
  const LayerOptions& options() const { return options_; }

  size_t cache_size(int64_t max_tokens) const;
  size_t workspace_size(int64_t max_tokens) const;
  // Bytes of MoeLayerWeights::fp8 (0 with kBF16).
  size_t fp8_weight_size() const;

  // kFP8Blockwise and kMXFP8 only. FP8: quantises weights.w1 and weights.w2 (bf16 masters)
  // into weights.fp8 — E4M3 with one fp32 scale per 128x128 block along each GEMM's K (H for
  // w1, F for w2; w1 in its interleaved GLU order, so the blocks are the kernel's). Call it once
  // per optimiser step, after the weights change and before the first forward that reads them;
  // forwards of every micro-batch of the step reuse it. Then the transposed copies
  // (transpose_fp8_blockwise_weights, moefuse/grouped_gemm_fp8_dgrad.h: a byte transpose, the
  // same blocks). With a shared expert, shared_w1 and shared_w2 likewise. Four kernels (eight
  // with a shared expert) on `stream`, no allocation: CUDA-graph safe (capture it in the step's
  // graph ahead of the forward). kMXFP8: the four quantise-dequantised bf16 copies instead (w1
  // along H and along fc1, w2 along F and along H: moefuse/quant.h qdq_mxfp8_rows / _cols), same
  // contract.
  void prepare_fp8_weights(const MoeLayerWeights& weights, cudaStream_t stream);

  // y and losses from x [T, H] bf16. Writes the cache for backward. CUDA-graph safe: yes.
  // kFP8Blockwise: the routed experts and the shared expert run in FP8 from weights.fp8
  // (prepare_fp8_weights), the router in bf16; docs/layer.md. kMXFP8: the bf16 path on operands
  // quantise-dequantised along each GEMM's K (x, act; the weights from weights.fp8).
  void forward(const TensorView& x, const MoeLayerWeights& weights, const MoeLayerOutputs& out,
               Workspace cache, Workspace workspace, cudaStream_t stream,
               const LayerRun& run = {});

  // Every gradient from dy [T, H] bf16, the same x and weights, and the cache the forward wrote.
  // The cache is only read. CUDA-graph safe: yes. kFP8Blockwise: the routed experts' backward
  // in FP8 from weights.fp8 (FC1's pre-activation cached by the forward's FP8 GEMM, or with
  // recompute_pre recomputed in FP8 from x; both dgrads on the
  // transposed FP8 weights, both wgrads on column-wise quantised operands, or in bf16 with
  // config.bf16_wgrad), the shared expert's likewise; the router and the bias gradients in bf16
  // (docs/layer.md). kMXFP8: the bf16 backward on
  // quantise-dequantised operands (docs/fp8.md, "The MXFP8 layer").
  void backward(const TensorView& x, const TensorView& dy, const MoeLayerWeights& weights,
                const MoeLayerGrads& grads, Workspace cache, Workspace workspace,
                cudaStream_t stream, const LayerRun& run = {});

 private:
  MoeConfig config_;
  LayerOptions options_;
  // The cuBLAS handle, second stream and its events, on the device current at construction.
  std::unique_ptr<layer::LayerHandles> handles_;
};

}  // namespace moefuse
