// The FP8 kernel's host launcher (a persistent grid of 2-CTA clusters) and its six
// instantiations (bf16 output in 192-wide tiles, fp32 output; E4M3 output and the dGLU, each with
// three or seven epilogue warps; config.h Fp8Tile says why bf16 output runs 192).
#include <cuda_bf16.h>
#include <cuda_fp8.h>

#include "cuda/check.h"
#include "cuda/gemm/cluster_launch.h"
#include "cuda/gemm/fp8/kernel.cuh"
#include "cuda/gemm/fp8/launch.h"
#include "cuda/gemm/common/tensor_map.h"
#include "moefuse/grouped_gemm_fp8.h"

namespace moefuse::gemm::fp8 {
namespace {

template <class OutT, int kRoleSet, int kN = kBlockN>
void launch_fp8(const Fp8GemmLaunch& launch, cudaStream_t stream) {
  using G = Fp8Tile<kN>;
  const Fp8GemmProblem& p = launch.problem;
  if (p.m_cap == 0) return;  // nothing can be written
  // A and B in boxes of half a tile (64 rows of A, kN / 2 of B): each CTA of a cluster loads
  // one half of the shared operand (mainloop.cuh).
  const CUtensorMap tmap_a = make_tma_2d(kTmaE4m3, launch.a, p.m_cap, p.k, kHalfRows, kBlockK);
  const CUtensorMap tmap_b =
      make_tma_3d(kTmaE4m3, launch.b, p.num_experts, p.n, p.k, G::kBHalfRows, kBlockK);
  // The activation scales, K-major [K groups, M_cap padded to 4]: one row of kScaleBoxRows per
  // box (config.h).
  const CUtensorMap tmap_scales = make_tma_2d(kTmaF32Rows, launch.a_scales, fp8_scale_groups(p.k),
                                              fp8_scale_rows(p.m_cap), 1, kScaleBoxRows);

  // The host cannot know the unit count; this bound (each expert adds at most one partial
  // m-block, and an m-block run as n-pairs at most one phantom) only trims the grid for tiny
  // problems.
  const int64_t max_m_blocks = int64_t{ceil_div(p.m_cap, kBlockM)} + p.num_experts;
  const int64_t max_units = (max_m_blocks * ceil_div(p.n, kN) + max_m_blocks + 1) / 2;
  const int64_t smem_bytes = G::smem_bytes(p.num_experts);
  auto* kernel = &grouped_gemm_fp8_kernel<OutT, kRoleSet, kN>;
  MOEFUSE_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                          static_cast<int>(smem_bytes)));
  launch_persistent<kClusterSize>(kernel, max_units, 0, roles(kRoleSet, kN).threads,
                                  smem_bytes, stream, "the FP8 grouped GEMM", tmap_a, tmap_b,
                                  tmap_scales, p, launch.epilogue, launch.dglu);
}

}  // namespace

void launch_grouped_gemm_fp8_bf16(const Fp8GemmLaunch& launch, cudaStream_t stream) {
  launch_fp8<__nv_bfloat16, 0, kBf16OutBlockN>(launch, stream);
}

void launch_grouped_gemm_fp8_fp32(const Fp8GemmLaunch& launch, cudaStream_t stream) {
  launch_fp8<float, 0>(launch, stream);
}

void launch_grouped_gemm_fp8_e4m3(const Fp8GemmLaunch& launch, cudaStream_t stream) {
  Fp8GemmLaunch l = launch;
  l.problem.pairs = is_glu_op(launch.epilogue.op) ? UnitPairs::kNGroupsOnly
                                                  : UnitPairs::kMGroupsFirst;
  // Seven epilogue warps at short K, three at long K (config.h, Roles).
  if (seven_epilogue_warps(launch.problem.k)) launch_fp8<__nv_fp8_e4m3, 7>(l, stream);
  else launch_fp8<__nv_fp8_e4m3, 0>(l, stream);
}

void launch_grouped_gemm_fp8_dglu(const Fp8GemmLaunch& launch, cudaStream_t stream) {
  // Seven epilogue warps at short K, three at long K (config.h, Roles).
  if (seven_epilogue_warps(launch.problem.k)) launch_fp8<__nv_bfloat16, 7>(launch, stream);
  else launch_fp8<__nv_bfloat16, 3>(launch, stream);
}

}  // namespace moefuse::gemm::fp8
