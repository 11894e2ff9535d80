// What the layer memory-plan tests share: the plan's 256-byte buffer alignment, written out, and
// a buffer found by the start of its name.
#pragma once

#include <cstddef>
#include <string>

#include "moefuse/layer.h"

namespace moefuse::test {

constexpr size_t align256(size_t b) { return (b + 255) / 256 * 256; }

// The first buffer of p whose name starts with prefix, or null.
inline const LayerBuffer* find_buffer(const LayerMemoryPlan& p, const std::string& prefix) {
  for (const auto& b : p.buffers)
    if (b.name.rfind(prefix, 0) == 0) return &b;
  return nullptr;
}

}  // namespace moefuse::test
