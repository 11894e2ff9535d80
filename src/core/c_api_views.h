// The C ABI's raw pointers as the C++ layers' views: what moefuse_layer_* and moefuse_ep_layer_*
// both hand to their layer. Internal; not installed.
#pragma once

#include <cstdint>
#include <initializer_list>

#include "moefuse/error.h"
#include "moefuse/layer.h"
#include "moefuse/moefuse.h"
#include "moefuse/tensor.h"

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

}  // namespace moefuse::capi
