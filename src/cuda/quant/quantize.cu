// Host side of the GPU quantisers (moefuse/quant.h): validation, then launches of
// rows_kernel.cuh (1xG groups) and blocks_kernel.cuh (128x128 blocks).
#include <cuda_bf16.h>

#include <cstdint>
#include <utility>

#include "cuda/check.h"
#include "cuda/device.h"
#include "cuda/quant/blocks_kernel.cuh"
#include "cuda/quant/grid.h"
#include "cuda/sm_count.h"
#include "cuda/quant/rows_kernel.cuh"
#include "cuda/quant/validate.h"
#include "moefuse/quant.h"

namespace moefuse {
namespace {

using namespace cuda::quant;

// Launches quantize_rows_kernel for `x` [M, K] (already validated): a warp a row, grid-stride,
// at least one CTA so NVFP4 writes its tensor scale even for an empty tensor.
template <class Recipe>
void launch_rows(const TensorView& x, RowQuantParams p, cudaStream_t stream) {
  p.rows = x.size(0);
  p.cols = x.size(1);
  p.groups_per_row = ceil_div(p.cols, Recipe::kGroup);
  const auto ctas =
      static_cast<unsigned>(grid_stride_ctas(p.rows, kRowsWarps, cuda::device_sm_count()));
  if (x.dtype == DType::kBFloat16)
    quantize_rows_kernel<__nv_bfloat16, Recipe><<<ctas, kRowsThreads, 0, stream>>>(p);
  else
    quantize_rows_kernel<float, Recipe><<<ctas, kRowsThreads, 0, stream>>>(p);
  MOEFUSE_CUDA_CHECK_LAUNCH();
}

// The checks of both NVFP4 quantisers; returns {M, K}. amax and tensor_scale must differ: every
// CTA reads amax while the first one writes tensor_scale.
std::pair<int64_t, int64_t> expect_nvfp4(const TensorView& x, const TensorView& q,
                                         const TensorView& block_scales, const TensorView& amax,
                                         const TensorView& tensor_scale) {
  auto [m, k] = expect_input_matrix(x, "x");
  expect_device_tensor(q, "q", DType::kFloat4E2M1, {m, k});
  expect_tensor(block_scales, "block_scales", DType::kFloat8E4M3, Device::kCuda,
                {m, ceil_div(k, formats::kNvfp4Block)});
  expect_tensor(amax, "amax", DType::kFloat32, Device::kCuda, {1});
  expect_tensor(tensor_scale, "tensor_scale", DType::kFloat32, Device::kCuda, {1});
  MOEFUSE_EXPECT(amax.data != tensor_scale.data, "tensor_scale", "a buffer distinct from amax",
                 "the amax buffer");
  return {m, k};
}

// The NVFP4 quantise pass (views already checked): tensor scale and block scales from the amax
// that is in `amax` when the kernel runs.
void launch_nvfp4(const TensorView& x, const TensorView& q, const TensorView& block_scales,
                  const TensorView& amax, const TensorView& tensor_scale, cudaStream_t stream) {
  launch_rows<Nvfp4Recipe>(x,
                           {.x = x.data,
                            .q = q.as<uint8_t>(),
                            .scales = block_scales.data,
                            .amax = amax.as<const float>(),
                            .tensor_scale = tensor_scale.as<float>()},
                           stream);
}

}  // namespace

void quantize_fp8_blockwise_1x128(const TensorView& x, const TensorView& q,
                                  const TensorView& scales, cudaStream_t stream) {
  auto [m, k] = expect_input_matrix(x, "x");
  expect_device_tensor(q, "q", DType::kFloat8E4M3, {m, k});
  expect_tensor(scales, "scales", DType::kFloat32, Device::kCuda,
                {m, ceil_div(k, formats::kBlockwiseGroup)});
  cuda::expect_launchable(stream);
  if (x.empty()) return;
  launch_rows<BlockwiseRecipe>(x, {.x = x.data, .q = q.as<uint8_t>(), .scales = scales.data},
                               stream);
}

void quantize_mxfp8(const TensorView& x, const TensorView& q, const TensorView& scales,
                    cudaStream_t stream) {
  auto [m, k] = expect_input_matrix(x, "x");
  expect_device_tensor(q, "q", DType::kFloat8E4M3, {m, k});
  expect_tensor(scales, "scales", DType::kFloat8E8M0, Device::kCuda,
                {m, ceil_div(k, formats::kMxBlock)});
  cuda::expect_launchable(stream);
  if (x.empty()) return;
  launch_rows<MxRecipe>(x, {.x = x.data, .q = q.as<uint8_t>(), .scales = scales.data}, stream);
}

void quantize_nvfp4(const TensorView& x, const TensorView& q, const TensorView& block_scales,
                    const TensorView& amax, const TensorView& tensor_scale, cudaStream_t stream) {
  auto [m, k] = expect_nvfp4(x, q, block_scales, amax, tensor_scale);
  cuda::expect_launchable(stream);
  MOEFUSE_CUDA_CHECK(cudaMemsetAsync(amax.data, 0, sizeof(float), stream));
  const int64_t vectors = m * k / kVec;
  if (vectors > 0) {
    const auto ctas = static_cast<unsigned>(grid_stride_ctas(
        vectors, int64_t(kRowsThreads) * kInFlight<float>, cuda::device_sm_count()));
    auto* bits = static_cast<uint32_t*>(amax.data);
    if (x.dtype == DType::kBFloat16)
      amax_kernel<<<ctas, kRowsThreads, 0, stream>>>(x.as<const __nv_bfloat16>(), vectors, bits);
    else
      amax_kernel<<<ctas, kRowsThreads, 0, stream>>>(x.as<const float>(), vectors, bits);
    MOEFUSE_CUDA_CHECK_LAUNCH();
  }
  launch_nvfp4(x, q, block_scales, amax, tensor_scale, stream);
}

void quantize_nvfp4_with_amax(const TensorView& x, const TensorView& q,
                              const TensorView& block_scales, const TensorView& amax,
                              const TensorView& tensor_scale, cudaStream_t stream) {
  expect_nvfp4(x, q, block_scales, amax, tensor_scale);
  cuda::expect_launchable(stream);
  launch_nvfp4(x, q, block_scales, amax, tensor_scale, stream);
}

void quantize_fp8_blockwise_128x128(const TensorView& w, const TensorView& q,
                                    const TensorView& scales, cudaStream_t stream) {
  const WeightExtents e = expect_weights(w, "w", DType::kFloat32, /*any_input_dtype=*/true);
  expect_like_weights(q, "q", DType::kFloat8E4M3, w.rank, e);
  expect_weight_scales(scales, w.rank, e);
  cuda::expect_launchable(stream);
  if (w.empty()) return;
  const dim3 grid(static_cast<unsigned>(ceil_div(e.cols, kBlockEdge)),
                  static_cast<unsigned>(ceil_div(e.rows, kBlockEdge)),
                  static_cast<unsigned>(e.experts));
  const BlockQuantParams p{.w = w.data, .q = q.as<uint8_t>(), .scales = scales.as<float>(),
                           .rows = e.rows, .cols = e.cols};
  if (w.dtype == DType::kBFloat16)
    quantize_blocks_kernel<__nv_bfloat16><<<grid, kBlocksThreads, 0, stream>>>(p);
  else
    quantize_blocks_kernel<float><<<grid, kBlocksThreads, 0, stream>>>(p);
  MOEFUSE_CUDA_CHECK_LAUNCH();
}

}  // namespace moefuse
