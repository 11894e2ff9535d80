/* moefuse C ABI: for bindings (Python via ctypes, other languages).
 *
 * Every call returns a moefuse_status_t. On failure the calling thread keeps a message,
 * readable with moefuse_last_error() until its next failing call. No call throws. */
#ifndef MOEFUSE_MOEFUSE_H_
#define MOEFUSE_MOEFUSE_H_

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
} moefuse_config_t;

/* The message of the calling thread's last failure ("" if none). */
const char* moefuse_last_error(void);

/* "major.minor.patch" */
const char* moefuse_version(void);

/* Fills *config with the named preset (qwen3-30b-a3b, gpt-oss-120b, mixtral-8x7b, deepseek-v3). */
moefuse_status_t moefuse_config_preset(const char* name, moefuse_config_t* config);

/* Checks every field; on failure the message names the field, the expected and the actual value. */
moefuse_status_t moefuse_config_validate(const moefuse_config_t* config);

#ifdef __cplusplus
}
#endif

#endif /* MOEFUSE_MOEFUSE_H_ */
