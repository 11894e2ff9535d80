/* moefuse C ABI: for bindings (Python via ctypes, other languages).
 *
 * Every call returns a moefuse_status_t. On failure the calling thread keeps a message,
 * readable with moefuse_last_error() until its next failing call. No call throws. */
#ifndef MOEFUSE_MOEFUSE_H_
#define MOEFUSE_MOEFUSE_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
  MOEFUSE_STATUS_OK = 0,
  MOEFUSE_STATUS_INVALID_ARGUMENT = 1,
  MOEFUSE_STATUS_CUDA_ERROR = 2,
  MOEFUSE_STATUS_NOT_SUPPORTED = 3,
  MOEFUSE_STATUS_INTERNAL_ERROR = 4,
} moefuse_status_t;

/* Values match moefuse::Activation, RouterKind and PrecisionRecipe. */
typedef enum {
  MOEFUSE_ACTIVATION_SWIGLU = 0,
  MOEFUSE_ACTIVATION_GEGLU = 1,
  MOEFUSE_ACTIVATION_REGLU = 2,
  MOEFUSE_ACTIVATION_SQUARED_RELU = 3,
  MOEFUSE_ACTIVATION_CLAMPED_SWIGLU = 4,
} moefuse_activation_t;

typedef enum {
  MOEFUSE_ROUTER_SOFTMAX_TOPK = 0,
  MOEFUSE_ROUTER_SIGMOID_GROUP_TOPK = 1,
} moefuse_router_kind_t;

typedef enum {
  MOEFUSE_PRECISION_BF16 = 0,
  MOEFUSE_PRECISION_FP8_BLOCKWISE = 1,
  MOEFUSE_PRECISION_MXFP8 = 2,
} moefuse_precision_t;

/* Mirrors moefuse::MoeConfig (see moefuse/config.h for the meaning of each field). */
typedef struct {
  int64_t hidden;
  int64_t ffn;
  int64_t num_experts;
  int64_t top_k;
  moefuse_activation_t activation;
  float clamped_swiglu_alpha;
  float clamped_swiglu_limit;
  int32_t expert_bias; /* 0 or 1 */
  int64_t shared_expert_ffn;
  moefuse_router_kind_t router_kind;
  int32_t router_renormalize; /* 0 or 1 */
  float routed_scaling_factor;
  int32_t router_num_groups;
  int32_t router_topk_groups;
  int32_t router_use_score_bias; /* 0 or 1 */
  float aux_loss_coeff;
  float z_loss_coeff;
  moefuse_precision_t precision;
  int32_t bf16_wgrad; /* 0 or 1: an FP8 precision's weight gradients in bf16 */
} moefuse_config_t;

/* The message of the calling thread's last failure ("" if none). */
const char* moefuse_last_error(void);

/* "major.minor.patch" */
const char* moefuse_version(void);

/* The git commit the library was built from (12 hex digits, "-dirty" if the tree had changes,
   "unknown" outside a git checkout): for results files to name the kernels they measured. */
const char* moefuse_build_commit(void);

/* Fills *config with the named preset (qwen3-30b-a3b, gpt-oss-120b, mixtral-8x7b, deepseek-v3). */
moefuse_status_t moefuse_config_preset(const char* name, moefuse_config_t* config);

/* Checks every field; on failure the message names the field, the expected and the actual value. */
moefuse_status_t moefuse_config_validate(const moefuse_config_t* config);

/* Layout of the ABI's structs, for bindings that mirror them (python/moefuse checks its ctypes
 * copies with it): *bytes = sizeof(type) when field is NULL, else offsetof(type, field).
 * type: "moefuse_config_t", "moefuse_layer_weights_t", "moefuse_layer_grads_t", or
 * moefuse_ep.h's "moefuse_ep_options_t". */
moefuse_status_t moefuse_abi_layout(const char* type, const char* field, size_t* bytes);

/* ---- The MoE layer on the GPU (moefuse/layer.h) ------------------------------------------------
 * Device pointers, contiguous, shapes from the config and T: x, dy, y, dx [T, H] bf16;
 * w_router [E, H] bf16; w1 [E, fc1, H] bf16 (GLU rows interleaved); w2 [E, H, F] bf16;
 * shared_w1 [shared_fc1, H], shared_w2 [H, shared_F] bf16; score_bias [E], b1 [E, fc1],
 * b2 [E, H] fp32; losses [2] fp32; every gradient but dx fp32, shaped as its weight, but d_w1
 * and d_w2, which are bf16 when grads.expert_grads says so (the fp32 sums rounded once).
 * NULL for a tensor the config does not have. `stream` is a cudaStream_t.
 * precision MOEFUSE_PRECISION_FP8_BLOCKWISE (fused mode, H, F and the shared expert's F
 * multiples of 16) or MOEFUSE_PRECISION_MXFP8 (fused, multiples of 32; the bf16 kernels on
 * quantise-dequantised operands, docs/fp8.md): the weights also carry fp8_weights, a 256-byte
 * aligned device region of moefuse_layer_fp8_weight_bytes that
 * moefuse_layer_prepare_fp8_weights fills from w1 and w2 (FP8: and the shared expert's) once per
 * optimiser step; forward and backward both read it (and check it). */
typedef struct moefuse_layer moefuse_layer_t;

typedef enum {
  MOEFUSE_LAYER_FUSED = 0,
  MOEFUSE_LAYER_UNFUSED = 1,
} moefuse_layer_mode_t;

typedef struct {
  const void* w_router;
  const float* score_bias;
  const void* w1;
  const float* b1;
  const void* w2;
  const float* b2;
  const void* shared_w1;
  const void* shared_w2;
  void* fp8_weights; /* FP8 precision only, else NULL */
  size_t fp8_weights_bytes;
} moefuse_layer_weights_t;

/* The dtype of d_w1 and d_w2 (a zeroed struct asks for fp32). bf16: the fp32 sum of an expert's
 * rows rounded once, as torch's bf16 weight gradients; half the bytes written, none converted. */
typedef enum {
  MOEFUSE_EXPERT_GRADS_FP32 = 0,
  MOEFUSE_EXPERT_GRADS_BF16 = 1,
} moefuse_expert_grads_t;

typedef struct {
  void* dx;
  float* d_w_router;
  void* d_w1;
  float* d_b1;
  void* d_w2;
  float* d_b2;
  float* d_shared_w1;
  float* d_shared_w2;
  moefuse_expert_grads_t expert_grads;
  /* An input: the losses' upstream gradient d(loss)/d{aux_loss, z_loss}, [2] fp32 on the device,
   * read there by backward (autograd's: 0 for a loss the caller never used). NULL (a zeroed
   * struct): both 1, each loss entering the total with weight 1. */
  const float* loss_grads;
  /* Nonzero: every weight gradient (all but dx) is fp32 (expert_grads FP32) and backward adds the
   * step's gradient to it (main-grad accumulation over micro-batches) instead of overwriting. */
  int32_t accumulate;
} moefuse_layer_grads_t;

/* Bytes of the per-layer cache and of the workspace for `tokens` tokens. No GPU needed. */
moefuse_status_t moefuse_layer_sizes(const moefuse_config_t* config, moefuse_layer_mode_t mode,
                                     int32_t recompute_pre, int64_t tokens, size_t* cache_bytes,
                                     size_t* workspace_bytes);

/* Bytes of moefuse_layer_weights_t.fp8_weights (0 for bf16). No GPU needed. */
moefuse_status_t moefuse_layer_fp8_weight_bytes(const moefuse_config_t* config, size_t* bytes);

/* Creates the layer (a cuBLAS handle and a second stream); not capturable. */
moefuse_status_t moefuse_layer_create(const moefuse_config_t* config, moefuse_layer_mode_t mode,
                                      int32_t recompute_pre, moefuse_layer_t** layer);
moefuse_status_t moefuse_layer_destroy(moefuse_layer_t* layer);

/* Enqueue forward / backward on `stream`; no allocation, no sync: CUDA-graph safe. */
moefuse_status_t moefuse_layer_forward(moefuse_layer_t* layer, int64_t tokens, const void* x,
                                       const moefuse_layer_weights_t* weights, void* y,
                                       float* losses, void* cache, size_t cache_bytes,
                                       void* workspace, size_t workspace_bytes, void* stream);
/* FP8 precision: quantises weights->w1 and weights->w2 (and the shared expert's) into
 * weights->fp8_weights on `stream` (128x128 blocks). No allocation, no sync: CUDA-graph safe. */
moefuse_status_t moefuse_layer_prepare_fp8_weights(moefuse_layer_t* layer,
                                                   const moefuse_layer_weights_t* weights,
                                                   void* stream);

moefuse_status_t moefuse_layer_backward(moefuse_layer_t* layer, int64_t tokens, const void* x,
                                        const void* dy, const moefuse_layer_weights_t* weights,
                                        const moefuse_layer_grads_t* grads, void* cache,
                                        size_t cache_bytes, void* workspace,
                                        size_t workspace_bytes, void* stream);

#ifdef __cplusplus
}
#endif

#endif /* MOEFUSE_MOEFUSE_H_ */
