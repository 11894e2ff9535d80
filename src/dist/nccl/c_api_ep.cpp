// The C twin of moefuse::EpMoeLayer (moefuse_ep.h). The handle owns the rank's NCCL communicator,
// made from the unique id its caller shares, and destroys it after the layer.
#include <cuda_runtime.h>
#include <nccl.h>

#include <cstring>
#include <memory>
#include <string>

#include "core/c_api.h"
#include "core/c_api_views.h"
#include "dist/nccl/nccl_check.h"
#include "moefuse/ep_layer.h"
#include "moefuse/error.h"
#include "moefuse/moefuse_ep.h"

static_assert(sizeof(ncclUniqueId) == MOEFUSE_EP_UNIQUE_ID_BYTES,
              "MOEFUSE_EP_UNIQUE_ID_BYTES must be sizeof(ncclUniqueId)");

// Members destroyed in reverse: the layer (its windows are the communicator's) before the
// communicator.
struct moefuse_ep_layer {
  struct Comm {
    ncclComm_t comm = nullptr;
    ~Comm() {
      if (comm) ncclCommDestroy(comm);
    }
  } comm;
  std::unique_ptr<moefuse::EpMoeLayer> layer;
};

using moefuse::capi::guarded;

extern "C" {

moefuse_status_t moefuse_ep_unique_id(uint8_t* id) {
  return guarded([&] {
    moefuse::capi::expect_pointer(id, "id", "a buffer of MOEFUSE_EP_UNIQUE_ID_BYTES bytes");
    ncclUniqueId unique{};
    MOEFUSE_NCCL_CHECK(nullptr, ncclGetUniqueId(&unique));
    std::memcpy(id, &unique, sizeof unique);
  });
}

moefuse_status_t moefuse_ep_layer_create(const moefuse_config_t* config, const uint8_t* id,
                                         int32_t ranks, int32_t rank,
                                         const moefuse_ep_options_t* options,
                                         moefuse_ep_layer_t** layer) {
  return guarded([&] {
    using namespace moefuse::capi;
    expect_pointer(config, "config", "a pointer to a moefuse_config_t");
    expect_pointer(id, "id", "the MOEFUSE_EP_UNIQUE_ID_BYTES bytes of moefuse_ep_unique_id");
    expect_pointer(options, "options", "a pointer to a moefuse_ep_options_t");
    expect_pointer(layer, "layer", "a pointer to receive the layer");
    *layer = nullptr;
    MOEFUSE_EXPECT(ranks >= 1, "ranks", "at least 1", std::to_string(ranks));
    MOEFUSE_EXPECT(rank >= 0 && rank < ranks, "rank", "in [0, " + std::to_string(ranks) + ")",
                   std::to_string(rank));
    const moefuse::MoeConfig c = from_c(*config);
    c.validate();  // before the collective: a bad config fails alone, not after every rank joins
    ncclUniqueId unique{};
    std::memcpy(&unique, id, sizeof unique);
    auto handle = std::make_unique<moefuse_ep_layer>();
    MOEFUSE_NCCL_CHECK(nullptr, ncclCommInitRank(&handle->comm.comm, ranks, unique, rank));
    handle->layer = std::make_unique<moefuse::EpMoeLayer>(
        c, handle->comm.comm,
        moefuse::EpLayerOptions{.max_tokens_per_rank = options->max_tokens_per_rank,
                                .receive_capacity_rows = options->receive_capacity_rows,
                                .chunks = options->chunks,
                                .transfer_sms = options->transfer_sms,
                                .fp8_dispatch = options->fp8_dispatch != 0});
    *layer = handle.release();
  });
}

moefuse_status_t moefuse_ep_layer_destroy(moefuse_ep_layer_t* layer) {
  return guarded([&] { delete layer; });
}

moefuse_status_t moefuse_ep_layer_info(const moefuse_ep_layer_t* layer, int64_t* first_expert,
                                       int64_t* local_experts, size_t* cache_bytes,
                                       size_t* workspace_bytes) {
  return guarded([&] {
    using namespace moefuse::capi;
    expect_pointer(layer, "layer", "a layer from moefuse_ep_layer_create");
    for (const void* p : {static_cast<const void*>(first_expert),
                          static_cast<const void*>(local_experts),
                          static_cast<const void*>(cache_bytes),
                          static_cast<const void*>(workspace_bytes)})
      expect_pointer(p, "first_expert, local_experts, cache_bytes and workspace_bytes",
                     "pointers to receive the values");
    *first_expert = layer->layer->first_expert();
    *local_experts = layer->layer->local_experts();
    *cache_bytes = layer->layer->cache_size();
    *workspace_bytes = layer->layer->workspace_size();
  });
}

moefuse_status_t moefuse_ep_layer_forward(moefuse_ep_layer_t* layer, int64_t tokens,
                                          const void* x, const moefuse_layer_weights_t* weights,
                                          void* y, float* losses, void* cache, size_t cache_bytes,
                                          void* workspace, size_t workspace_bytes, void* stream) {
  return guarded([&] {
    moefuse::capi::expect_pointer(layer, "layer", "a layer from moefuse_ep_layer_create");
    moefuse::capi::forward_from_c(*layer->layer, layer->layer->local_experts(), tokens, x,
                                  weights, y, losses, {.data = cache, .bytes = cache_bytes},
                                  {.data = workspace, .bytes = workspace_bytes}, stream);
  });
}

moefuse_status_t moefuse_ep_layer_backward(moefuse_ep_layer_t* layer, int64_t tokens,
                                           const void* x, const void* dy,
                                           const moefuse_layer_weights_t* weights,
                                           const moefuse_layer_grads_t* grads, void* cache,
                                           size_t cache_bytes, void* workspace,
                                           size_t workspace_bytes, void* stream) {
  return guarded([&] {
    moefuse::capi::expect_pointer(layer, "layer", "a layer from moefuse_ep_layer_create");
    moefuse::capi::backward_from_c(*layer->layer, layer->layer->local_experts(), tokens, x, dy,
                                   weights, grads, {.data = cache, .bytes = cache_bytes},
                                   {.data = workspace, .bytes = workspace_bytes}, stream);
  });
}

moefuse_status_t moefuse_ep_layer_transport_flags(const moefuse_ep_layer_t* layer,
                                                  int32_t** device_flags) {
  return guarded([&] {
    using namespace moefuse::capi;
    expect_pointer(layer, "layer", "a layer from moefuse_ep_layer_create");
    expect_pointer(device_flags, "device_flags", "a pointer to receive the device pointer");
    *device_flags = layer->layer->transport_flags().as<int32_t>();
  });
}

}  // extern "C"
