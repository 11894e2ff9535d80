// The public FP8 FC2 dgrad (moefuse/grouped_gemm_fp8_dgrad.h): validation, the FP8 kernel with
// the dGLU epilogue, then the BF16 backward's dp reduction (the same partial layout, 128-column
// blocks here).
#include <cuda_bf16.h>

#include "cuda/device.h"
#include "cuda/gemm/backward/launch.h"
#include "cuda/gemm/fp8/dgrad_validate.h"
#include "cuda/gemm/fp8/launch.h"
#include "moefuse/grouped_gemm_fp8_dgrad.h"

namespace moefuse {

void grouped_gemm_fc2_dgrad_fp8(const Fc2DgradFp8Args& args, const TensorView& dp_partial,
                                cudaStream_t stream) {
  validate_fc2_dgrad_fp8(args, Device::kCuda);
  const bool dp = !is_absent(args.d_row_scale);
  const int64_t m = args.dys.size(0), f = args.w2t.size(1), h = args.w2t.size(2);
  const int dp_blocks = static_cast<int>(fc2_dgrad_fp8_dp_blocks(f));
  if (dp) {
    expect_tensor(dp_partial, "dp_partial", DType::kFloat32, Device::kCuda, {m, dp_blocks});
    expect_aligned(dp_partial, "dp_partial");
    expect_fc2_dgrad_fp8_disjoint(args, {dp_partial, "dp_partial"});
  }
  cuda::expect_launchable(stream);
  float* partial = dp ? dp_partial.as<float>() : nullptr;
  const float* row_scale = is_absent(args.row_scale) ? nullptr : args.row_scale.as<const float>();
  const gemm::fp8::Fp8GemmLaunch launch{
      .problem = {.offsets = args.offsets.as<const int>(),
                  .b_scales = args.w2t_scales.as<const float>(),
                  .num_experts = static_cast<int>(args.w2t.size(0)),
                  .m_cap = static_cast<int>(m),
                  .n = static_cast<int>(f),
                  .k = static_cast<int>(h),
                  .n_out = static_cast<int>(f),
                  .d = nullptr},
      .epilogue = {},
      .dglu = {.act = {.op = gemm::activation_epilogue_op(args.activation),
                       .clamp_alpha = args.clamped_swiglu.alpha,
                       .clamp_limit = args.clamped_swiglu.limit},
               .pre = args.pre.as<const __nv_bfloat16>(),
               .d_pre = args.d_pre.as<__nv_bfloat16>(),
               .scaled_act =
                   is_absent(args.scaled_act) ? nullptr : args.scaled_act.as<__nv_bfloat16>(),
               .row_scale = row_scale,
               .dp_partial = partial,
               .dp_stride = dp_blocks},
      .a = args.dys.data,
      .a_scales = args.dys_scales.data,
      .b = args.w2t.data};
  gemm::fp8::launch_grouped_gemm_fp8_dglu(launch, stream);
  if (!dp) return;
  const bool bias = !is_absent(args.b2);
  gemm::bwd::launch_dp_reduce(
      {.offsets = args.offsets.as<const int>(),
       .num_experts = static_cast<int>(args.w2t.size(0)),
       .m_cap = static_cast<int>(m),
       .hidden = static_cast<int>(h),
       .dp_partial = partial,
       .dp_stride = dp_blocks,
       .dp_blocks = dp_blocks,
       .dys = bias ? args.dys_bf16.as<const __nv_bfloat16>() : nullptr,
       .b2 = bias ? args.b2.as<const float>() : nullptr,
       .dp = args.d_row_scale.as<float>()},
      stream);
}

}  // namespace moefuse
