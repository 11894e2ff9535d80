// Argument checks of the FP8 grouped GEMM (moefuse/grouped_gemm_fp8.h), shared by the kernel's
// entry point (Device::kCuda) and the CPU reference (Device::kCpu).
#include <cstdint>
#include <limits>
#include <string>

#include "cuda/gemm/fp8/mxfp8_emulation.h"
#include "cuda/gemm/params.h"
#include "cuda/router/checks.h"
#include "moefuse/error.h"
#include "moefuse/grouped_gemm_fp8.h"

namespace moefuse {
namespace {

void expect_int32_extent(int64_t v, std::string_view name, std::string_view what) {
  MOEFUSE_EXPECT(v <= std::numeric_limits<int32_t>::max(), name,
                 std::string(what) + " below 2^31", std::to_string(v));
}

}  // namespace

void validate_grouped_gemm_fp8(const GroupedGemmFp8Args& args, Device device) {
  MOEFUSE_EXPECT(args.epilogue == GemmEpilogue::kLinear ||
                     args.epilogue == GemmEpilogue::kActivation,
                 "epilogue", "kLinear or kActivation",
                 std::to_string(static_cast<int>(args.epilogue)));
  if (args.epilogue == GemmEpilogue::kActivation)
    gemm::activation_epilogue_op(args.activation);  // throws naming "activation"
  const bool glu = args.epilogue == GemmEpilogue::kActivation && is_glu(args.activation);

  MOEFUSE_EXPECT(args.b.rank == 3, "b", "rank 3 [E, N, K]", "rank " + std::to_string(args.b.rank));
  const int64_t num_experts = args.b.size(0), n = args.b.size(1), k = args.b.size(2);
  expect_tensor(args.b, "b", DType::kFloat8E4M3, device, {kAnyExtent, kAnyExtent, kAnyExtent});
  MOEFUSE_EXPECT(num_experts >= 1 && num_experts <= kGroupedGemmMaxExperts, "b",
                 "1 to " + std::to_string(kGroupedGemmMaxExperts) + " experts (dim 0)",
                 std::to_string(num_experts));
  MOEFUSE_EXPECT(k > 0 && k % 16 == 0, "b",
                 "K (dim 2) > 0 and a multiple of 16 (TMA row stride of e4m3)",
                 "K = " + std::to_string(k));
  const int64_t n_multiple = glu ? 16 : 8;
  MOEFUSE_EXPECT(n > 0 && n % n_multiple == 0, "b",
                 "N (dim 1) > 0 and a multiple of " + std::to_string(n_multiple) +
                     (glu ? " (GLU interleave)" : ""),
                 "N = " + std::to_string(n));
  expect_int32_extent(n, "b", "N");
  expect_int32_extent(k, "b", "K");
  expect_aligned(args.b, "b", 16);
  MOEFUSE_EXPECT(args.recipe == Fp8Recipe::kDeepSeek || args.recipe == Fp8Recipe::kMxfp8,
                 "recipe", "Fp8Recipe::kDeepSeek or kMxfp8",
                 std::to_string(static_cast<int>(args.recipe)));
  const bool mx = args.recipe == Fp8Recipe::kMxfp8;
  if (mx) {
    MOEFUSE_EXPECT(k % kMxfp8ScaleGroup == 0, "b", "K (dim 2) a multiple of 32 (whole MXFP8 blocks)",
                   "K = " + std::to_string(k));
    MOEFUSE_EXPECT(n % 16 == 0, "b",
                   "N (dim 1) a multiple of 16 (TMA row stride of the MXFP8 weight scales)",
                   "N = " + std::to_string(n));
    expect_tensor(args.b_scales, "b_scales", DType::kFloat8E8M0, device,
                  {num_experts, k / kMxfp8ScaleGroup, n});
    expect_aligned(args.b_scales, "b_scales", 16);
  } else {
    expect_tensor(args.b_scales, "b_scales", DType::kFloat32, device,
                  {num_experts, fp8_scale_groups(n), fp8_scale_groups(k)});
  }

  expect_tensor(args.offsets, "offsets", DType::kInt32, device, {num_experts + 1});

  expect_tensor(args.a, "a", DType::kFloat8E4M3, device, {kAnyExtent, k});
  expect_aligned(args.a, "a", 16);
  const int64_t m_cap = args.a.size(0);
  expect_int32_extent(m_cap, "a", "rows");
  if (mx)
    expect_tensor(args.a_scales, "a_scales", DType::kFloat8E8M0, device,
                  {k / kMxfp8ScaleGroup, mxfp8_scale_rows(m_cap)});
  else
    expect_tensor(args.a_scales, "a_scales", DType::kFloat32, device,
                  {fp8_scale_groups(k), fp8_scale_rows(m_cap)});
  expect_aligned(args.a_scales, "a_scales", 16);

  const bool e4m3_out = args.d.dtype == DType::kFloat8E4M3;
  MOEFUSE_EXPECT(args.d.dtype == DType::kBFloat16 || args.d.dtype == DType::kFloat32 ||
                     (e4m3_out && !mx),
                 "d", mx ? "dtype bf16 or fp32 (e4m3 output is the DeepSeek recipe's)"
                         : "dtype bf16, fp32 or e4m3",
                 "dtype " + std::string(dtype_name(args.d.dtype)));
  const int64_t n_out = glu ? n / 2 : n;
  expect_tensor(args.d, "d", args.d.dtype, device, {m_cap, n_out});
  expect_aligned(args.d, "d", 16);
  if (e4m3_out) {
    MOEFUSE_EXPECT(n_out % 16 == 0, "d",
                   "N_out (dim 1) a multiple of 16 for e4m3 output (16-byte code stores)",
                   "N_out = " + std::to_string(n_out));
    expect_tensor(args.d_scales, "d_scales", DType::kFloat32, device,
                  {fp8_scale_groups(n_out), fp8_scale_rows(m_cap)});
  } else {
    MOEFUSE_EXPECT(is_absent(args.d_scales), "d_scales", "absent unless d is e4m3",
                   "a tensor with d " + std::string(dtype_name(args.d.dtype)));
  }

  if (!is_absent(args.row_scale))
    expect_tensor(args.row_scale, "row_scale", DType::kFloat32, device, {m_cap});
  if (!is_absent(args.bias)) {
    expect_tensor(args.bias, "bias", DType::kFloat32, device, {num_experts, n});
    // The FP8 epilogue loads column pairs; the BF16 GEMM of the MXFP8 emulation wants 16 bytes.
    expect_aligned(args.bias, "bias", mx ? 16 : 8);
  }
  if (!is_absent(args.pre_activation)) {
    // The epilogue warps copy the staged bf16 tile, which only the bf16-output kernel has (the
    // fp32 one must not round h, docs/fp8.md); without an activation h is D itself.
    MOEFUSE_EXPECT(args.epilogue == GemmEpilogue::kActivation, "pre_activation",
                   "absent with GemmEpilogue::kLinear (h is D itself)", "a tensor");
    MOEFUSE_EXPECT(args.d.dtype != DType::kFloat32, "pre_activation",
                   "absent with fp32 d (only the bf16 and e4m3 epilogues stage bf16 h)",
                   "a tensor with d " + std::string(dtype_name(args.d.dtype)));
    expect_tensor(args.pre_activation, "pre_activation", DType::kBFloat16, device, {m_cap, n});
    expect_aligned(args.pre_activation, "pre_activation", 16);  // 16-byte stores
  }
  // The MXFP8 emulation's bf16 copies (the CPU reference needs none), written while every other
  // argument is read or written.
  GroupedGemmArgs copies;
  if (mx && device == Device::kCuda) {
    cuda::expect_workspace(args.workspace, grouped_gemm_fp8_workspace_size(args));
    copies = gemm::fp8::mxfp8_bf16_gemm_args(args);
  }
  const NamedView outputs[] = {{copies.a, "workspace"},
                               {copies.b, "workspace"},
                               {args.d, "d"},
                               {args.d_scales, "d_scales"},
                               {args.pre_activation, "pre_activation"}};
  const NamedView inputs[] = {{args.a, "a"},           {args.a_scales, "a_scales"},
                              {args.b, "b"},           {args.b_scales, "b_scales"},
                              {args.offsets, "offsets"}, {args.row_scale, "row_scale"},
                              {args.bias, "bias"}};
  expect_outputs_disjoint(outputs, inputs);
}

}  // namespace moefuse
