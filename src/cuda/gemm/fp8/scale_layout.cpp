// Host conversion of 1x128 activation scales from the quantiser's row-major layout to the FP8
// grouped GEMM's K-major layout (moefuse/grouped_gemm_fp8.h explains why K-major).
#include <cstdint>
#include <string>

#include "moefuse/error.h"
#include "moefuse/grouped_gemm_fp8.h"

namespace moefuse {

void transpose_fp8_activation_scales(const TensorView& src, const TensorView& dst) {
  MOEFUSE_EXPECT(src.rank == 2, "src", "rank 2 [M, ceil(K/128)]",
                 "rank " + std::to_string(src.rank));
  const int64_t rows = src.size(0), groups = src.size(1);
  expect_tensor(src, "src", DType::kFloat32, Device::kCpu, {rows, groups});
  expect_tensor(dst, "dst", DType::kFloat32, Device::kCpu, {groups, fp8_scale_rows(rows)});
  const int64_t bytes = src.numel() * 4, dst_bytes = dst.numel() * 4;
  const auto* s = static_cast<const uint8_t*>(src.data);
  const auto* d = static_cast<const uint8_t*>(dst.data);
  MOEFUSE_EXPECT(bytes == 0 || dst_bytes == 0 || d + dst_bytes <= s || s + bytes <= d, "dst",
                 "memory not overlapping src", "overlapping");
  const int64_t pitch = fp8_scale_rows(rows);
  const float* in = src.as<const float>();
  float* out = dst.as<float>();
  for (int64_t g = 0; g < groups; ++g)
    for (int64_t r = 0; r < pitch; ++r) out[g * pitch + r] = r < rows ? in[r * groups + g] : 1.0f;
}

}  // namespace moefuse
