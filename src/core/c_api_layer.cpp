// The C twin of moefuse::MoeLayer (moefuse.h): raw pointers become views shaped by the config.
#include <cuda_runtime.h>

#include <string>

#include "core/c_api.h"
#include "core/c_api_views.h"
#include "moefuse/error.h"
#include "moefuse/layer.h"
#include "moefuse/moefuse.h"

struct moefuse_layer {
  moefuse::MoeLayer layer;
};

namespace moefuse::capi {
namespace {

LayerOptions layer_options(moefuse_layer_mode_t mode, int32_t recompute_pre) {
  MOEFUSE_EXPECT(mode == MOEFUSE_LAYER_FUSED || mode == MOEFUSE_LAYER_UNFUSED, "mode",
                 "MOEFUSE_LAYER_FUSED or MOEFUSE_LAYER_UNFUSED",
                 std::to_string(static_cast<int>(mode)));
  return {.mode = mode == MOEFUSE_LAYER_FUSED ? LayerMode::kFused : LayerMode::kUnfused,
          .recompute_pre = recompute_pre != 0};
}

}  // namespace
}  // namespace moefuse::capi

using moefuse::capi::guarded;

extern "C" {

moefuse_status_t moefuse_layer_sizes(const moefuse_config_t* config, moefuse_layer_mode_t mode,
                                     int32_t recompute_pre, int64_t tokens, size_t* cache_bytes,
                                     size_t* workspace_bytes) {
  return guarded([&] {
    using namespace moefuse::capi;
    expect_pointer(config, "config", "a pointer to a moefuse_config_t");
    expect_pointer(cache_bytes, "cache_bytes", "a pointer to a size_t");
    expect_pointer(workspace_bytes, "workspace_bytes", "a pointer to a size_t");
    const moefuse::LayerMemoryPlan p = moefuse::layer_memory_plan(
        from_c(*config), layer_options(mode, recompute_pre), tokens);
    *cache_bytes = p.cache_bytes;
    *workspace_bytes = p.workspace_bytes;
  });
}

moefuse_status_t moefuse_layer_fp8_weight_bytes(const moefuse_config_t* config, size_t* bytes) {
  return guarded([&] {
    using namespace moefuse::capi;
    expect_pointer(config, "config", "a pointer to a moefuse_config_t");
    expect_pointer(bytes, "bytes", "a pointer to a size_t");
    *bytes = moefuse::layer_memory_plan(from_c(*config), {}, 1).fp8_weight_bytes;
  });
}

moefuse_status_t moefuse_layer_create(const moefuse_config_t* config, moefuse_layer_mode_t mode,
                                      int32_t recompute_pre, moefuse_layer_t** layer) {
  return guarded([&] {
    using namespace moefuse::capi;
    expect_pointer(config, "config", "a pointer to a moefuse_config_t");
    expect_pointer(layer, "layer", "a pointer to receive the layer");
    *layer = nullptr;
    *layer = new moefuse_layer{moefuse::MoeLayer(from_c(*config),
                                                 layer_options(mode, recompute_pre))};
  });
}

moefuse_status_t moefuse_layer_destroy(moefuse_layer_t* layer) {
  return guarded([&] { delete layer; });
}

moefuse_status_t moefuse_layer_forward(moefuse_layer_t* layer, int64_t tokens, const void* x,
                                       const moefuse_layer_weights_t* weights, void* y,
                                       float* losses, void* cache, size_t cache_bytes,
                                       void* workspace, size_t workspace_bytes, void* stream) {
  return guarded([&] {
    moefuse::capi::expect_pointer(layer, "layer", "a layer from moefuse_layer_create");
    moefuse::capi::forward_from_c(layer->layer, 0, tokens, x, weights, y, losses,
                                  {.data = cache, .bytes = cache_bytes},
                                  {.data = workspace, .bytes = workspace_bytes}, stream);
  });
}

moefuse_status_t moefuse_layer_prepare_fp8_weights(moefuse_layer_t* layer,
                                                   const moefuse_layer_weights_t* weights,
                                                   void* stream) {
  return guarded([&] {
    using namespace moefuse::capi;
    expect_pointer(layer, "layer", "a layer from moefuse_layer_create");
    expect_pointer(weights, "weights", "a pointer to a moefuse_layer_weights_t");
    layer->layer.prepare_fp8_weights(weights_of(layer->layer.config(), *weights),
                                     static_cast<cudaStream_t>(stream));
  });
}

moefuse_status_t moefuse_layer_backward(moefuse_layer_t* layer, int64_t tokens, const void* x,
                                        const void* dy, const moefuse_layer_weights_t* weights,
                                        const moefuse_layer_grads_t* grads, void* cache,
                                        size_t cache_bytes, void* workspace,
                                        size_t workspace_bytes, void* stream) {
  return guarded([&] {
    moefuse::capi::expect_pointer(layer, "layer", "a layer from moefuse_layer_create");
    moefuse::capi::backward_from_c(layer->layer, 0, tokens, x, dy, weights, grads,
                                   {.data = cache, .bytes = cache_bytes},
                                   {.data = workspace, .bytes = workspace_bytes}, stream);
  });
}

}  // extern "C"
