// Instantiation: bf16 output, A by TMA, 128 × 192 tiles (config.h narrow_width), one CTA a tile.
// Not in 2-CTA clusters: they bought gpt-oss (the preset with these widths) nothing at 256 wide
// (run 18: fused FC1 1.006x, FC2 0.997x the time), and at 192 wide the clustered build read a
// null row scale in some runs (run 31, call 2: compute-sanitizer in stage_accumulators; the same
// tests passed three times out of three without clusters). docs/measurements.md, run 31.
#include "cuda/gemm/launch.cuh"

namespace moefuse::gemm {

void launch_grouped_gemm_bf16_narrow(const GemmLaunch& launch, cudaStream_t stream) {
  launch_grouped_gemm<__nv_bfloat16, false, 1, kNarrowBlockN>(launch, stream);
}

}  // namespace moefuse::gemm
