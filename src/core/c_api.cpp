#include "core/c_api.h"

#include <string>

#include "moefuse/error.h"
#include "moefuse_git_commit.h"

namespace moefuse::capi {
namespace {
thread_local std::string last_error;
}

void set_last_error(const char* message) { last_error = message; }

moefuse_status_t status_of_current_exception() noexcept {
  try {
    throw;
  } catch (const InvalidArgument& e) {
    set_last_error(e.what());
    return MOEFUSE_STATUS_INVALID_ARGUMENT;
  } catch (const CudaError& e) {
    set_last_error(e.what());
    return MOEFUSE_STATUS_CUDA_ERROR;
  } catch (const NotSupported& e) {
    set_last_error(e.what());
    return MOEFUSE_STATUS_NOT_SUPPORTED;
  } catch (const std::exception& e) {
    set_last_error(e.what());
    return MOEFUSE_STATUS_INTERNAL_ERROR;
  } catch (...) {
    set_last_error("moefuse: unknown internal error");
    return MOEFUSE_STATUS_INTERNAL_ERROR;
  }
}

MoeConfig from_c(const moefuse_config_t& c) {
  MoeConfig m;
  m.hidden = c.hidden;
  m.ffn = c.ffn;
  m.num_experts = c.num_experts;
  m.top_k = c.top_k;
  MOEFUSE_EXPECT(c.activation >= MOEFUSE_ACTIVATION_SWIGLU &&
                     c.activation <= MOEFUSE_ACTIVATION_CLAMPED_SWIGLU,
                 "config.activation", "a moefuse_activation_t value",
                 std::to_string(static_cast<int>(c.activation)));
  m.activation = static_cast<Activation>(c.activation);
  m.clamped_swiglu = {.alpha = c.clamped_swiglu_alpha, .limit = c.clamped_swiglu_limit};
  m.expert_bias = c.expert_bias != 0;
  m.shared_expert_ffn = c.shared_expert_ffn;
  MOEFUSE_EXPECT(c.router_kind == MOEFUSE_ROUTER_SOFTMAX_TOPK ||
                     c.router_kind == MOEFUSE_ROUTER_SIGMOID_GROUP_TOPK,
                 "config.router_kind", "a moefuse_router_kind_t value",
                 std::to_string(static_cast<int>(c.router_kind)));
  m.router = {.kind = static_cast<RouterKind>(c.router_kind),
              .renormalize = c.router_renormalize != 0,
              .routed_scaling_factor = c.routed_scaling_factor,
              .num_groups = c.router_num_groups,
              .topk_groups = c.router_topk_groups,
              .use_score_bias = c.router_use_score_bias != 0,
              .aux_loss_coeff = c.aux_loss_coeff,
              .z_loss_coeff = c.z_loss_coeff};
  MOEFUSE_EXPECT(c.precision >= MOEFUSE_PRECISION_BF16 && c.precision <= MOEFUSE_PRECISION_MXFP8,
                 "config.precision", "a moefuse_precision_t value",
                 std::to_string(static_cast<int>(c.precision)));
  m.precision = static_cast<PrecisionRecipe>(c.precision);
  m.bf16_wgrad = c.bf16_wgrad != 0;
  return m;
}

moefuse_config_t to_c(const MoeConfig& m) {
  return {.hidden = m.hidden,
          .ffn = m.ffn,
          .num_experts = m.num_experts,
          .top_k = m.top_k,
          .activation = static_cast<moefuse_activation_t>(m.activation),
          .clamped_swiglu_alpha = m.clamped_swiglu.alpha,
          .clamped_swiglu_limit = m.clamped_swiglu.limit,
          .expert_bias = m.expert_bias ? 1 : 0,
          .shared_expert_ffn = m.shared_expert_ffn,
          .router_kind = static_cast<moefuse_router_kind_t>(m.router.kind),
          .router_renormalize = m.router.renormalize ? 1 : 0,
          .routed_scaling_factor = m.router.routed_scaling_factor,
          .router_num_groups = m.router.num_groups,
          .router_topk_groups = m.router.topk_groups,
          .router_use_score_bias = m.router.use_score_bias ? 1 : 0,
          .aux_loss_coeff = m.router.aux_loss_coeff,
          .z_loss_coeff = m.router.z_loss_coeff,
          .precision = static_cast<moefuse_precision_t>(m.precision),
          .bf16_wgrad = m.bf16_wgrad ? 1 : 0};
}

}  // namespace moefuse::capi

using moefuse::capi::guarded;

extern "C" {

const char* moefuse_last_error(void) { return moefuse::capi::last_error.c_str(); }

const char* moefuse_version(void) { return "0.1.0"; }

const char* moefuse_build_commit(void) { return MOEFUSE_GIT_COMMIT; }

moefuse_status_t moefuse_config_preset(const char* name, moefuse_config_t* config) {
  return guarded([&] {
    MOEFUSE_EXPECT(name != nullptr, "name", "a preset name", "NULL");
    MOEFUSE_EXPECT(config != nullptr, "config", "a pointer to a moefuse_config_t", "NULL");
    *config = moefuse::capi::to_c(moefuse::preset(name));
  });
}

moefuse_status_t moefuse_config_validate(const moefuse_config_t* config) {
  return guarded([&] {
    MOEFUSE_EXPECT(config != nullptr, "config", "a pointer to a moefuse_config_t", "NULL");
    moefuse::capi::from_c(*config).validate();
  });
}

}  // extern "C"
