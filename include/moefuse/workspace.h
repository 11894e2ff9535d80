// A caller-owned scratch buffer in device memory, sized by an op's *_workspace_size query.
#pragma once

#include <cstddef>

namespace moefuse {

// Ops carve their scratch out of it at 256-byte aligned offsets; `data` must be 256-byte aligned
// (cudaMalloc's pointers are) and `bytes` at least what the op's size query returned.
struct Workspace {
  void* data = nullptr;
  size_t bytes = 0;
};

}  // namespace moefuse
