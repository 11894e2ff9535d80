/* moefuse C ABI for expert parallelism over NCCL (moefuse/ep_layer.h), for bindings:
 * libmoefuse_ep_c.so, built when configure finds NCCL >= 2.28. It shares moefuse.h's types and
 * conventions (statuses, moefuse_last_error of this library, device pointers, no call throws).
 *
 * The rank's communicator is made here from an NCCL unique id (rank 0 makes one with
 * moefuse_ep_unique_id and sends it to the others, e.g. over torch.distributed), so the process
 * needs no NCCL headers; the libnccl loaded must be the release the library was built against
 * (NCCL's device API before 2.29: otherwise moefuse_ep_layer_create returns NOT_SUPPORTED). */
#ifndef MOEFUSE_MOEFUSE_EP_H_
#define MOEFUSE_MOEFUSE_EP_H_

#include <stddef.h>
#include <stdint.h>

#include "moefuse/moefuse.h"

#ifdef __cplusplus
extern "C" {
#endif

#define MOEFUSE_EP_UNIQUE_ID_BYTES 128 /* sizeof(ncclUniqueId) */

typedef struct moefuse_ep_layer moefuse_ep_layer_t;

typedef struct {
  int64_t max_tokens_per_rank;   /* required, >= 1 */
  int64_t receive_capacity_rows; /* 0: the worst case */
  int32_t chunks;                /* 1: no pipelining */
  int32_t transfer_sms;          /* with chunks > 1 */
  int32_t fp8_dispatch;          /* nonzero: the forward's rows cross as FP8 (ep_layer.h) */
} moefuse_ep_options_t;

/* A new NCCL unique id in id[MOEFUSE_EP_UNIQUE_ID_BYTES]. */
moefuse_status_t moefuse_ep_unique_id(uint8_t* id);

/* Collective: rank `rank` of `ranks`, every rank with the same id, config and options, each on
 * its own GPU (the current device). Creates the NCCL communicator and the layer; blocks until
 * every rank has joined. */
moefuse_status_t moefuse_ep_layer_create(const moefuse_config_t* config, const uint8_t* id,
                                         int32_t ranks, int32_t rank,
                                         const moefuse_ep_options_t* options,
                                         moefuse_ep_layer_t** layer);
/* After the streams that ran the layer are synchronised. */
moefuse_status_t moefuse_ep_layer_destroy(moefuse_ep_layer_t* layer);

/* This rank's experts [first_expert, first_expert + local_experts), and the cache and workspace
 * bytes for any T up to max_tokens_per_rank. */
moefuse_status_t moefuse_ep_layer_info(const moefuse_ep_layer_t* layer, int64_t* first_expert,
                                       int64_t* local_experts, size_t* cache_bytes,
                                       size_t* workspace_bytes);

/* As moefuse_layer_forward / _backward, collectively; the expert weights (w1, b1, w2, b2) and
 * their gradients are the rank's local_experts, the router's all E; d_w_router is this rank's
 * tokens' part. No allocation, no sync: CUDA-graph safe. */
moefuse_status_t moefuse_ep_layer_forward(moefuse_ep_layer_t* layer, int64_t tokens,
                                          const void* x, const moefuse_layer_weights_t* weights,
                                          void* y, float* losses, void* cache, size_t cache_bytes,
                                          void* workspace, size_t workspace_bytes, void* stream);
moefuse_status_t moefuse_ep_layer_backward(moefuse_ep_layer_t* layer, int64_t tokens,
                                           const void* x, const void* dy,
                                           const moefuse_layer_weights_t* weights,
                                           const moefuse_layer_grads_t* grads, void* cache,
                                           size_t cache_bytes, void* workspace,
                                           size_t workspace_bytes, void* stream);

/* The transport's flag word (a device pointer to one int32: 1 rows dropped at the receive
 * capacity, 2 bad offsets; never cleared by the layer). */
moefuse_status_t moefuse_ep_layer_transport_flags(const moefuse_ep_layer_t* layer,
                                                  int32_t** device_flags);

#ifdef __cplusplus
}
#endif

#endif /* MOEFUSE_MOEFUSE_EP_H_ */
