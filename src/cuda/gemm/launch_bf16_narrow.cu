// Instantiation: bf16 output, A by TMA, 128 × 192 tiles (config.h narrow_width), one CTA a tile.
// Not in 2-CTA clusters: they bought gpt-oss (the preset with these widths) nothing at 256 wide
// (run 18: fused FC1 1.006x, FC2 0.997x the time). The clustered 192-wide build once faulted (run
// 31: its consumers read a null row scale in four tests, every run); since the consumers take
// their tiles from the producer's slots (common/tile_slots.cuh) it passes those tests three times
// out of three, memcheck clean (run 32, call 8), and measures 1.013-1.015x the time of this build
// on gpt-oss's fused FC1 and FC2 (call 9). docs/measurements.md.
#include "cuda/gemm/launch.cuh"

namespace moefuse::gemm {

void launch_grouped_gemm_bf16_narrow(const GemmLaunch& launch, cudaStream_t stream) {
  launch_grouped_gemm<__nv_bfloat16, false, 1, kNarrowBlockN>(launch, stream);
}

}  // namespace moefuse::gemm
