// Host side of the GPU dequantisers (moefuse/quant.h): validation, then dequant_kernel.cuh.
#include "cuda/check.h"
#include "cuda/device.h"
#include "cuda/quant/dequant_kernel.cuh"
#include "cuda/quant/grid.h"
#include "cuda/sm_count.h"
#include "cuda/quant/validate.h"
#include "moefuse/quant.h"

namespace moefuse {
namespace {

using namespace cuda::quant;

// A warp a row, grid-stride (dequant_kernel.cuh).
template <ScaleKind kKind>
void launch_dequant(const DequantParams& p, cudaStream_t stream) {
  if (p.rows == 0 || p.cols == 0) return;
  const auto ctas = static_cast<unsigned>(
      grid_stride_ctas(p.rows, kDequantWarps, cuda::device_sm_count()));
  dequantize_kernel<kKind><<<ctas, kDequantThreads, 0, stream>>>(p);
  MOEFUSE_CUDA_CHECK_LAUNCH();
}

// 1xG groups of a [M, K] matrix.
DequantParams row_groups(const TensorView& q, const TensorView& scales, const TensorView& x,
                         int64_t group) {
  const int64_t m = q.size(0), k = q.size(1);
  return {.q = q.as<const uint8_t>(), .scales = scales.data, .x = x.as<float>(), .rows = m,
          .cols = k, .batch_rows = m, .row_group = 1, .scale_rows = m,
          .scale_cols = ceil_div(k, group)};
}

}  // namespace

void dequantize_fp8_blockwise_1x128(const TensorView& q, const TensorView& scales,
                                    const TensorView& x, cudaStream_t stream) {
  auto [m, k] = expect_code_matrix(q, "q", DType::kFloat8E4M3);
  expect_tensor(scales, "scales", DType::kFloat32, Device::kCuda,
                {m, ceil_div(k, formats::kBlockwiseGroup)});
  expect_device_tensor(x, "x", DType::kFloat32, {m, k});
  cuda::expect_launchable(stream);
  launch_dequant<ScaleKind::kFp32>(row_groups(q, scales, x, formats::kBlockwiseGroup), stream);
}

void dequantize_mxfp8(const TensorView& q, const TensorView& scales, const TensorView& x,
                      cudaStream_t stream) {
  auto [m, k] = expect_code_matrix(q, "q", DType::kFloat8E4M3);
  expect_tensor(scales, "scales", DType::kFloat8E8M0, Device::kCuda,
                {m, ceil_div(k, formats::kMxBlock)});
  expect_device_tensor(x, "x", DType::kFloat32, {m, k});
  cuda::expect_launchable(stream);
  launch_dequant<ScaleKind::kUE8M0>(row_groups(q, scales, x, formats::kMxBlock), stream);
}

void dequantize_nvfp4(const TensorView& q, const TensorView& block_scales,
                      const TensorView& tensor_scale, const TensorView& x, cudaStream_t stream) {
  auto [m, k] = expect_code_matrix(q, "q", DType::kFloat4E2M1);
  expect_tensor(block_scales, "block_scales", DType::kFloat8E4M3, Device::kCuda,
                {m, ceil_div(k, formats::kNvfp4Block)});
  expect_tensor(tensor_scale, "tensor_scale", DType::kFloat32, Device::kCuda, {1});
  expect_device_tensor(x, "x", DType::kFloat32, {m, k});
  cuda::expect_launchable(stream);
  DequantParams p = row_groups(q, block_scales, x, formats::kNvfp4Block);
  p.tensor_scale = tensor_scale.as<const float>();
  launch_dequant<ScaleKind::kNvfp4>(p, stream);
}

void dequantize_fp8_blockwise_128x128(const TensorView& q, const TensorView& scales,
                                      const TensorView& w, cudaStream_t stream) {
  const WeightExtents e = expect_weights(q, "q", DType::kFloat8E4M3, /*any_input_dtype=*/false);
  expect_weight_scales(scales, q.rank, e);
  expect_like_weights(w, "w", DType::kFloat32, q.rank, e);
  cuda::expect_launchable(stream);
  launch_dequant<ScaleKind::kFp32>(
      {.q = q.as<const uint8_t>(), .scales = scales.data, .x = w.as<float>(),
       .rows = e.experts * e.rows, .cols = e.cols, .batch_rows = e.rows,
       .row_group = formats::kBlockwiseGroup,
       .scale_rows = ceil_div(e.rows, formats::kBlockwiseGroup),
       .scale_cols = ceil_div(e.cols, formats::kBlockwiseGroup)},
      stream);
}

}  // namespace moefuse
