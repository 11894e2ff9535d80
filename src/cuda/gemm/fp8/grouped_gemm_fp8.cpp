// The public FP8 grouped GEMM (moefuse/grouped_gemm_fp8.h): validation, then the FP8 kernel
// (DeepSeek recipe) or the exact bf16 emulation (MXFP8).
#include "moefuse/grouped_gemm_fp8.h"

#include <string>

#include "cuda/device.h"
#include "cuda/gemm/fp8/launch.h"
#include "cuda/gemm/fp8/mxfp8_emulation.h"
#include "moefuse/error.h"

namespace moefuse {

size_t grouped_gemm_fp8_workspace_size(const GroupedGemmFp8Args& args) {
  if (args.recipe == Fp8Recipe::kDeepSeek) return 0;
  MOEFUSE_EXPECT(args.recipe == Fp8Recipe::kMxfp8, "recipe", "Fp8Recipe::kDeepSeek or kMxfp8",
                 std::to_string(static_cast<int>(args.recipe)));
  MOEFUSE_EXPECT(args.a.rank == 2, "a", "rank 2 [M_cap, K]", "rank " + std::to_string(args.a.rank));
  MOEFUSE_EXPECT(args.b.rank == 3, "b", "rank 3 [E, N, K]", "rank " + std::to_string(args.b.rank));
  return gemm::fp8::mxfp8_workspace(args.a.size(0), args.b.size(0), args.b.size(1),
                                    args.b.size(2))
      .bytes;
}

void grouped_gemm_fp8(const GroupedGemmFp8Args& args, cudaStream_t stream) {
  validate_grouped_gemm_fp8(args, Device::kCuda);
  cuda::expect_launchable(stream);
  if (args.recipe == Fp8Recipe::kMxfp8) {
    // Valid MXFP8 args make valid BF16 GEMM args (validate.cpp checks what grouped_gemm adds), so
    // no argument check fails once the dequantise passes are enqueued.
    gemm::fp8::launch_mxfp8_dequantize(args, stream);
    grouped_gemm(gemm::fp8::mxfp8_bf16_gemm_args(args), stream);
    return;
  }
  const bool activation = args.epilogue == GemmEpilogue::kActivation;
  const gemm::fp8::Fp8GemmLaunch launch{
      .problem = {.offsets = args.offsets.as<const int>(),
                  .b_scales = args.b_scales.as<const float>(),
                  .num_experts = static_cast<int>(args.b.size(0)),
                  .m_cap = static_cast<int>(args.a.size(0)),
                  .n = static_cast<int>(args.b.size(1)),
                  .k = static_cast<int>(args.b.size(2)),
                  .n_out = static_cast<int>(args.d.size(1)),
                  .d = args.d.data,
                  .d_scales = is_absent(args.d_scales) ? nullptr : args.d_scales.as<float>()},
      .epilogue = {.op = activation ? gemm::activation_epilogue_op(args.activation)
                                    : gemm::EpilogueOp::kLinear,
                   .clamp_alpha = args.clamped_swiglu.alpha,
                   .clamp_limit = args.clamped_swiglu.limit,
                   .bias = is_absent(args.bias) ? nullptr : args.bias.as<const float>(),
                   .row_scale = is_absent(args.row_scale) ? nullptr
                                                          : args.row_scale.as<const float>(),
                   .pre = is_absent(args.pre_activation)
                              ? nullptr
                              : args.pre_activation.as<__nv_bfloat16>()},
      .dglu = {},
      .a = args.a.data,
      .a_scales = args.a_scales.data,
      .b = args.b.data};
  switch (args.d.dtype) {
    case DType::kFloat32: gemm::fp8::launch_grouped_gemm_fp8_fp32(launch, stream); break;
    case DType::kFloat8E4M3: gemm::fp8::launch_grouped_gemm_fp8_e4m3(launch, stream); break;
    default: gemm::fp8::launch_grouped_gemm_fp8_bf16(launch, stream);
  }
}

}  // namespace moefuse
