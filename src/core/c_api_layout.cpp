// moefuse_abi_layout: sizeof/offsetof of the C ABI's structs, so bindings can check their mirrors.
#include <cstddef>
#include <cstring>
#include <string>

#include "core/c_api.h"
#include "moefuse/error.h"
#include "moefuse/moefuse.h"
#include "moefuse/moefuse_ep.h"

namespace moefuse::capi {
namespace {

struct FieldOffset {
  const char* type;
  const char* field;
  size_t offset;
};

struct TypeSize {
  const char* type;
  size_t size;
};

#define MOEFUSE_FIELD(T, f) FieldOffset{#T, #f, offsetof(T, f)}

constexpr TypeSize kSizes[] = {
    {"moefuse_config_t", sizeof(moefuse_config_t)},
    {"moefuse_layer_weights_t", sizeof(moefuse_layer_weights_t)},
    {"moefuse_layer_grads_t", sizeof(moefuse_layer_grads_t)},
    {"moefuse_ep_options_t", sizeof(moefuse_ep_options_t)},
};

constexpr FieldOffset kFields[] = {
    MOEFUSE_FIELD(moefuse_config_t, hidden),
    MOEFUSE_FIELD(moefuse_config_t, ffn),
    MOEFUSE_FIELD(moefuse_config_t, num_experts),
    MOEFUSE_FIELD(moefuse_config_t, top_k),
    MOEFUSE_FIELD(moefuse_config_t, activation),
    MOEFUSE_FIELD(moefuse_config_t, clamped_swiglu_alpha),
    MOEFUSE_FIELD(moefuse_config_t, clamped_swiglu_limit),
    MOEFUSE_FIELD(moefuse_config_t, expert_bias),
    MOEFUSE_FIELD(moefuse_config_t, shared_expert_ffn),
    MOEFUSE_FIELD(moefuse_config_t, router_kind),
    MOEFUSE_FIELD(moefuse_config_t, router_renormalize),
    MOEFUSE_FIELD(moefuse_config_t, routed_scaling_factor),
    MOEFUSE_FIELD(moefuse_config_t, router_num_groups),
    MOEFUSE_FIELD(moefuse_config_t, router_topk_groups),
    MOEFUSE_FIELD(moefuse_config_t, router_use_score_bias),
    MOEFUSE_FIELD(moefuse_config_t, aux_loss_coeff),
    MOEFUSE_FIELD(moefuse_config_t, z_loss_coeff),
    MOEFUSE_FIELD(moefuse_config_t, precision),
    MOEFUSE_FIELD(moefuse_config_t, bf16_wgrad),
    MOEFUSE_FIELD(moefuse_layer_weights_t, w_router),
    MOEFUSE_FIELD(moefuse_layer_weights_t, score_bias),
    MOEFUSE_FIELD(moefuse_layer_weights_t, w1),
    MOEFUSE_FIELD(moefuse_layer_weights_t, b1),
    MOEFUSE_FIELD(moefuse_layer_weights_t, w2),
    MOEFUSE_FIELD(moefuse_layer_weights_t, b2),
    MOEFUSE_FIELD(moefuse_layer_weights_t, shared_w1),
    MOEFUSE_FIELD(moefuse_layer_weights_t, shared_w2),
    MOEFUSE_FIELD(moefuse_layer_weights_t, fp8_weights),
    MOEFUSE_FIELD(moefuse_layer_weights_t, fp8_weights_bytes),
    MOEFUSE_FIELD(moefuse_layer_grads_t, dx),
    MOEFUSE_FIELD(moefuse_layer_grads_t, d_w_router),
    MOEFUSE_FIELD(moefuse_layer_grads_t, d_w1),
    MOEFUSE_FIELD(moefuse_layer_grads_t, d_b1),
    MOEFUSE_FIELD(moefuse_layer_grads_t, d_w2),
    MOEFUSE_FIELD(moefuse_layer_grads_t, d_b2),
    MOEFUSE_FIELD(moefuse_layer_grads_t, d_shared_w1),
    MOEFUSE_FIELD(moefuse_layer_grads_t, d_shared_w2),
    MOEFUSE_FIELD(moefuse_layer_grads_t, expert_grads),
    MOEFUSE_FIELD(moefuse_layer_grads_t, loss_grads),
    MOEFUSE_FIELD(moefuse_layer_grads_t, accumulate),
    // moefuse_ep.h's (a plain C header: the layout needs no NCCL).
    MOEFUSE_FIELD(moefuse_ep_options_t, max_tokens_per_rank),
    MOEFUSE_FIELD(moefuse_ep_options_t, receive_capacity_rows),
    MOEFUSE_FIELD(moefuse_ep_options_t, chunks),
    MOEFUSE_FIELD(moefuse_ep_options_t, transfer_sms),
    MOEFUSE_FIELD(moefuse_ep_options_t, fp8_dispatch),
};

#undef MOEFUSE_FIELD

size_t layout_of(const char* type, const char* field) {
  if (field == nullptr) {
    for (const TypeSize& s : kSizes) {
      if (std::strcmp(s.type, type) == 0) return s.size;
    }
    throw InvalidArgument("type", "a struct of moefuse.h", "'" + std::string(type) + "'");
  }
  for (const FieldOffset& f : kFields) {
    if (std::strcmp(f.type, type) == 0 && std::strcmp(f.field, field) == 0) return f.offset;
  }
  throw InvalidArgument("field", std::string("a field of ") + type, "'" + std::string(field) + "'");
}

}  // namespace
}  // namespace moefuse::capi

extern "C" moefuse_status_t moefuse_abi_layout(const char* type, const char* field,
                                               size_t* bytes) {
  return moefuse::capi::guarded([&] {
    MOEFUSE_EXPECT(type != nullptr, "type", "a struct name", "NULL");
    MOEFUSE_EXPECT(bytes != nullptr, "bytes", "a pointer to a size_t", "NULL");
    *bytes = moefuse::capi::layout_of(type, field);
  });
}
