// The public FP8 k-grouped wgrad (moefuse/grouped_gemm_fp8_wgrad.h): validation, TMA maps from
// pointers and shapes only, and the persistent launch over a tile count known on the host.
#include <algorithm>

#include "cuda/check.h"
#include "cuda/device.h"
#include "cuda/gemm/common/tensor_map.h"
#include "cuda/gemm/fp8/wgrad_kernel.cuh"
#include "cuda/sm_count.h"
#include "moefuse/grouped_gemm_fp8_wgrad.h"

namespace moefuse {

void grouped_gemm_fp8_wgrad(const GroupedGemmFp8WgradArgs& args, cudaStream_t stream) {
  using namespace gemm::fp8_wgrad;
  validate_grouped_gemm_fp8_wgrad(args, Device::kCuda);
  cuda::expect_launchable(stream);
  const Fp8WgradProblem p{.offsets = args.offsets.as<const int>(),
                          .num_experts = static_cast<int>(args.d.size(0)),
                          .n_a = static_cast<int>(args.at.size(0)),
                          .n_b = static_cast<int>(args.bt.size(0)),
                          .groups = static_cast<int>(args.a_scales.size(0)),
                          .d = args.d.data,
                          .fp32 = args.d.dtype == DType::kFloat32,
                          .accumulate = args.accumulate,
                          .tensor_store =
                              drains_by_tensor_stores(args.a_scales.size(0), args.d.size(0))};
  if (p.groups == 0) {  // no expert can have a row (and TMA maps need a non-empty tensor)
    if (!p.accumulate)
      MOEFUSE_CUDA_CHECK(
          cudaMemsetAsync(p.d, 0, args.d.numel() * dtype_bits(args.d.dtype) / 8, stream));
    return;
  }
  const int64_t cols = int64_t{p.groups} * kBlockK;
  const CUtensorMap tmap_a =
      gemm::make_tma_2d(gemm::kTmaE4m3, args.at.data, p.n_a, cols, kBlockM, kBlockK);
  const CUtensorMap tmap_b =
      gemm::make_tma_2d(gemm::kTmaE4m3, args.bt.data, p.n_b, cols, kBlockN, kBlockK);
  // Scales [G, N]: one group's 128 consecutive entries per box.
  const CUtensorMap tmap_sa =
      gemm::make_tma_2d(gemm::kTmaF32Rows, args.a_scales.data, p.groups, p.n_a, 1, kBlockM);
  const CUtensorMap tmap_sb =
      gemm::make_tma_2d(gemm::kTmaF32Rows, args.b_scales.data, p.groups, p.n_b, 1, kBlockN);
  // D [E, n_a, n_b] in boxes of 128 rows × 128 bytes (stage_swizzled's chunks; p.tensor_store).
  const CUtensorMap tmap_d =
      gemm::make_tma_3d(p.fp32 ? gemm::kTmaF32 : gemm::kTmaBf16, p.d, p.num_experts, p.n_a, p.n_b,
                        kBlockM, p.fp32 ? 32 : 64);
  const int64_t tiles = int64_t{p.num_experts} * gemm::ceil_div(p.n_a, kBlockM) *
                        gemm::ceil_div(p.n_b, kBlockN);
  const int grid = static_cast<int>(std::min<int64_t>(cuda::device_sm_count(), tiles));
  const int64_t bytes = smem_bytes(p.num_experts);
  MOEFUSE_CUDA_CHECK(cudaFuncSetAttribute(&fp8_wgrad_kernel,
                                          cudaFuncAttributeMaxDynamicSharedMemorySize,
                                          static_cast<int>(bytes)));
  fp8_wgrad_kernel<<<grid, gemm::kThreads, bytes, stream>>>(tmap_a, tmap_b, tmap_sa, tmap_sb,
                                                               tmap_d, p);
  MOEFUSE_CUDA_CHECK_LAUNCH();
}

}  // namespace moefuse
