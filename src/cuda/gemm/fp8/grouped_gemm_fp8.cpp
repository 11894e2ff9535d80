// The public FP8 grouped GEMM (moefuse/grouped_gemm_fp8.h): validation, then the kernel.
#include "moefuse/grouped_gemm_fp8.h"

#include "cuda/device.h"
#include "cuda/gemm/fp8/launch.h"
#include "moefuse/error.h"

namespace moefuse {

void grouped_gemm_fp8(const GroupedGemmFp8Args& args, cudaStream_t stream) {
  validate_grouped_gemm_fp8(args, Device::kCuda);
  if (args.recipe == Fp8Recipe::kMxfp8)  // the CPU reference has it; the kernel is to be built
    throw NotSupported("grouped_gemm_fp8: the MXFP8 recipe has no GPU kernel yet");
  cuda::expect_launchable(stream);
  const bool activation = args.epilogue == GemmEpilogue::kActivation;
  const gemm::fp8::Fp8GemmLaunch launch{
      .problem = {.offsets = args.offsets.as<const int>(),
                  .b_scales = args.b_scales.as<const float>(),
                  .num_experts = static_cast<int>(args.b.size(0)),
                  .m_cap = static_cast<int>(args.a.size(0)),
                  .n = static_cast<int>(args.b.size(1)),
                  .k = static_cast<int>(args.b.size(2)),
                  .n_out = static_cast<int>(args.d.size(1)),
                  .d = args.d.data},
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
  if (args.d.dtype == DType::kFloat32) gemm::fp8::launch_grouped_gemm_fp8_fp32(launch, stream);
  else gemm::fp8::launch_grouped_gemm_fp8_bf16(launch, stream);
}

}  // namespace moefuse
