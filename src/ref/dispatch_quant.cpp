#include "ref/dispatch_quant.h"

#include <vector>

#include "moefuse/grouped_gemm_fp8.h"
#include "ref/check.h"
#include "ref/dispatch.h"
#include "ref/quant.h"

namespace moefuse::ref {

void permute_quantize_fp8(const TensorView& x, const TensorView& token_of_row,
                          const TensorView& xs_fp8, const TensorView& xs_scales) {
  expect_f32(x, "x", {kAnyExtent, kAnyExtent});
  const int64_t H = x.size(1);
  expect_i32(token_of_row, "token_of_row", {kAnyExtent});
  const int64_t R = token_of_row.size(0), groups = fp8_scale_groups(H);
  // Checked here so that a bad output is named as the caller knows it, not as the helpers do.
  expect_tensor(xs_fp8, "xs_fp8", DType::kFloat8E4M3, Device::kCpu, {R, H});
  expect_f32(xs_scales, "xs_scales", {groups, fp8_scale_rows(R)});
  std::vector<float> xs(R * H), row_scales(R * groups);
  const auto xs_view = TensorView::contiguous(xs.data(), DType::kFloat32, {R, H});
  const auto scales_view = TensorView::contiguous(row_scales.data(), DType::kFloat32, {R, groups});
  permute(x, token_of_row, xs_view);
  quantize_fp8_blockwise_1x128(xs_view, xs_fp8, scales_view);
  transpose_fp8_activation_scales(scales_view, xs_scales);
}

}  // namespace moefuse::ref
