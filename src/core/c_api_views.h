// The C ABI's raw pointers as the C++ layers' views: what moefuse_layer_* and moefuse_ep_layer_*
// both hand to their layer. Internal; not installed.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <initializer_list>

#include "moefuse/error.h"
#include "moefuse/layer.h"
#include "moefuse/moefuse.h"
#include "moefuse/tensor.h"
#include "moefuse/workspace.h"

namespace moefuse::capi {

template <class P>
void expect_pointer(P* p, const char* name, const char* what) {
  MOEFUSE_EXPECT(p != nullptr, name, what, "NULL");
}

// A device view over `p` (absent when NULL: the layer says whether it must be there).
TensorView dev(const void* p, DType dtype, std::initializer_list<int64_t> shape);

// experts_held: as layer_weight_views (0: all E).
MoeLayerWeights weights_of(const MoeConfig& c, const moefuse_layer_weights_t& w,
                           int64_t experts_held = 0);
MoeLayerGrads grads_of(const MoeConfig& c, int64_t tokens, const moefuse_layer_grads_t& g,
                       int64_t experts_held = 0);

void expect_tokens(int64_t tokens);

// moefuse_layer_forward / moefuse_ep_layer_forward (and _backward) once the handle is known good:
// the remaining pointer checks, then the call on `layer` (a MoeLayer or an EpMoeLayer) with views
// shaped by its config, the expert tensors holding `experts_held` experts (0: all E).
template <class Layer>
void forward_from_c(Layer& layer, int64_t experts_held, int64_t tokens, const void* x,
                    const moefuse_layer_weights_t* weights, void* y, float* losses,
                    Workspace cache, Workspace workspace, void* stream) {
  expect_pointer(weights, "weights", "a pointer to a moefuse_layer_weights_t");
  expect_tokens(tokens);
  const MoeConfig& c = layer.config();
  layer.forward(dev(x, DType::kBFloat16, {tokens, c.hidden}),
                weights_of(c, *weights, experts_held),
                {.y = dev(y, DType::kBFloat16, {tokens, c.hidden}),
                 .losses = dev(losses, DType::kFloat32, {2})},
                cache, workspace, static_cast<cudaStream_t>(stream));
}

template <class Layer>
void backward_from_c(Layer& layer, int64_t experts_held, int64_t tokens, const void* x,
                     const void* dy, const moefuse_layer_weights_t* weights,
                     const moefuse_layer_grads_t* grads, Workspace cache, Workspace workspace,
                     void* stream) {
  expect_pointer(weights, "weights", "a pointer to a moefuse_layer_weights_t");
  expect_pointer(grads, "grads", "a pointer to a moefuse_layer_grads_t");
  expect_tokens(tokens);
  const MoeConfig& c = layer.config();
  layer.backward(dev(x, DType::kBFloat16, {tokens, c.hidden}),
                 dev(dy, DType::kBFloat16, {tokens, c.hidden}),
                 weights_of(c, *weights, experts_held),
                 grads_of(c, tokens, *grads, experts_held), cache, workspace,
                 static_cast<cudaStream_t>(stream));
}

}  // namespace moefuse::capi
