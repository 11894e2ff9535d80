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
  expect_disjoint(dst, "dst", src, "src");
  const int64_t pitch = fp8_scale_rows(rows);
  const float* in = src.as<const float>();
  float* out = dst.as<float>();
  for (int64_t g = 0; g < groups; ++g)
    for (int64_t r = 0; r < pitch; ++r) out[g * pitch + r] = r < rows ? in[r * groups + g] : 1.0f;
}

}  // namespace moefuse

namespace moefuse {
namespace {

// dst[g * pitch + r] = r < rows ? src[r * groups + g] : 2^0, for e8m0 bytes.
void transpose_mx_block(const uint8_t* src, uint8_t* dst, int64_t rows, int64_t groups,
                        int64_t pitch) {
  constexpr uint8_t kOne = 127;  // UE8M0 2^0
  for (int64_t g = 0; g < groups; ++g)
    for (int64_t r = 0; r < pitch; ++r) dst[g * pitch + r] = r < rows ? src[r * groups + g] : kOne;
}

}  // namespace

void transpose_mxfp8_activation_scales(const TensorView& src, const TensorView& dst) {
  MOEFUSE_EXPECT(src.rank == 2, "src", "rank 2 [M, K/32]", "rank " + std::to_string(src.rank));
  const int64_t rows = src.size(0), groups = src.size(1);
  expect_tensor(src, "src", DType::kFloat8E8M0, Device::kCpu, {rows, groups});
  expect_tensor(dst, "dst", DType::kFloat8E8M0, Device::kCpu, {groups, mxfp8_scale_rows(rows)});
  expect_disjoint(dst, "dst", src, "src");
  transpose_mx_block(src.as<const uint8_t>(), dst.as<uint8_t>(), rows, groups,
                     mxfp8_scale_rows(rows));
}

void transpose_mxfp8_weight_scales(const TensorView& src, const TensorView& dst) {
  MOEFUSE_EXPECT(src.rank == 3, "src", "rank 3 [E, N, K/32]", "rank " + std::to_string(src.rank));
  const int64_t experts = src.size(0), n = src.size(1), groups = src.size(2);
  expect_tensor(src, "src", DType::kFloat8E8M0, Device::kCpu, {experts, n, groups});
  expect_tensor(dst, "dst", DType::kFloat8E8M0, Device::kCpu, {experts, groups, n});
  expect_disjoint(dst, "dst", src, "src");
  for (int64_t e = 0; e < experts; ++e)
    transpose_mx_block(src.as<const uint8_t>() + e * n * groups,
                       dst.as<uint8_t>() + e * groups * n, n, groups, n);
}

}  // namespace moefuse
