// Lays named buffers out in one region of a memory plan: each at the next 256-byte aligned offset,
// each recorded (name, region, offset, bytes) for reports. The one-GPU layer's plan (plan.cpp) and
// the expert-parallel layer's (dist/ep_layer_plan.cpp) are both carved by it.
#pragma once

#include <cstddef>
#include <vector>

#include "cuda/layer/plan.h"
#include "moefuse/layer.h"

namespace moefuse::layer {

inline constexpr size_t kPlanAlign = 256;
constexpr size_t plan_align_up(size_t bytes) {
  return (bytes + kPlanAlign - 1) / kPlanAlign * kPlanAlign;
}

class Carver {
 public:
  // Buffers of `region` from byte `start` (a multiple of kPlanAlign), named into *names.
  Carver(LayerRegion region, size_t start, std::vector<LayerBuffer>* names)
      : region_(region), end_(start), names_(names) {}

  Slice add(const char* name, size_t bytes) {
    const Slice s{.region = region_ == LayerRegion::kCache         ? Region::kCache
                            : region_ == LayerRegion::kFp8Weights ? Region::kFp8Weights
                                                                  : Region::kWorkspace,
                  .offset = end_,
                  .bytes = bytes};
    end_ += plan_align_up(bytes);
    names_->push_back({.name = name, .region = region_, .offset = s.offset, .bytes = bytes});
    return s;
  }
  // The first free (aligned) byte after every buffer so far.
  size_t end() const { return end_; }

 private:
  LayerRegion region_;
  size_t end_;
  std::vector<LayerBuffer>* names_;
};

}  // namespace moefuse::layer
