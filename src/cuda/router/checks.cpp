#include "cuda/router/checks.h"

#include <string>

#include "moefuse/error.h"

namespace moefuse::cuda {

void expect_device(const TensorView& t, std::string_view name, DType dtype,
                   std::initializer_list<int64_t> shape) {
  expect_tensor(t, name, dtype, Device::kCuda, shape);
}

int32_t* expect_health(const TensorView& health) {
  if (is_absent(health)) return nullptr;
  expect_device(health, "health", DType::kInt32, {1});
  return health.as<int32_t>();
}

void expect_workspace(const Workspace& workspace, size_t needed) {
  MOEFUSE_EXPECT(workspace.bytes >= needed, "workspace", "at least " + std::to_string(needed) +
                 " bytes", std::to_string(workspace.bytes) + " bytes");
  const bool aligned = reinterpret_cast<uintptr_t>(workspace.data) % 256 == 0;
  MOEFUSE_EXPECT(needed == 0 || (workspace.data != nullptr && aligned), "workspace",
                 "a non-null, 256-byte aligned pointer",
                 workspace.data ? "a misaligned pointer" : "nullptr");
}

void expect_in_range(int64_t value, std::string_view name, int64_t lo, int64_t hi) {
  MOEFUSE_EXPECT(value >= lo && value <= hi, name,
                 "a value in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]",
                 std::to_string(value));
}

}  // namespace moefuse::cuda
