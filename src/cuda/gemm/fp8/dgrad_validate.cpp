// Argument checks of the FP8 dgrad's pieces (moefuse/grouped_gemm_fp8_dgrad.h), shared by the GPU
// entry points (Device::kCuda) and the CPU references (Device::kCpu).
#include <cstdint>
#include <limits>
#include <string>

#include "cuda/gemm/fp8/dgrad_validate.h"
#include "cuda/gemm/params.h"
#include "moefuse/error.h"
#include "moefuse/grouped_gemm_fp8_dgrad.h"

namespace moefuse {
namespace {

// An extent that becomes a GEMM's K (TMA's 16-byte rows of e4m3) or a row length.
void expect_extent(int64_t v, int64_t multiple, std::string_view name, std::string_view what) {
  MOEFUSE_EXPECT(v > 0 && v % multiple == 0 && v <= std::numeric_limits<int32_t>::max(), name,
                 std::string(what) + " > 0, a multiple of " + std::to_string(multiple) +
                     " and below 2^31",
                 std::string(what) + " = " + std::to_string(v));
}

}  // namespace

void validate_transpose_fp8_blockwise_weights(const TensorView& w, const TensorView& w_scales,
                                              const TensorView& wt, const TensorView& wt_scales,
                                              Device device) {
  MOEFUSE_EXPECT(w.rank == 3, "w", "rank 3 [E, N, K]", "rank " + std::to_string(w.rank));
  expect_tensor(w, "w", DType::kFloat8E4M3, device, {kAnyExtent, kAnyExtent, kAnyExtent});
  const int64_t e = w.size(0), n = w.size(1), k = w.size(2);
  MOEFUSE_EXPECT(e >= 1 && e <= 65535, "w", "1 to 65535 experts (dim 0, the grid's z)",
                 std::to_string(e));
  expect_extent(n, 16, "w", "N (dim 1)");
  expect_extent(k, 16, "w", "K (dim 2)");
  expect_aligned(w, "w");
  const int64_t ng = fp8_scale_groups(n), kg = fp8_scale_groups(k);
  expect_tensor(w_scales, "w_scales", DType::kFloat32, device, {e, ng, kg});
  expect_tensor(wt, "wt", DType::kFloat8E4M3, device, {e, k, n});
  expect_aligned(wt, "wt");
  expect_disjoint(wt, "wt", w, "w");
  expect_tensor(wt_scales, "wt_scales", DType::kFloat32, device, {e, kg, ng});
  expect_disjoint(wt_scales, "wt_scales", w_scales, "w_scales");
}

int64_t fc2_dgrad_fp8_dp_blocks(int64_t ffn) { return fp8_scale_groups(ffn); }

void validate_fc2_dgrad_fp8(const Fc2DgradFp8Args& args, Device device) {
  gemm::activation_epilogue_op(args.activation);  // throws naming "activation"
  MOEFUSE_EXPECT(args.w2t.rank == 3, "w2t", "rank 3 [E, F, H]",
                 "rank " + std::to_string(args.w2t.rank));
  expect_tensor(args.w2t, "w2t", DType::kFloat8E4M3, device, {kAnyExtent, kAnyExtent, kAnyExtent});
  const int64_t e = args.w2t.size(0), f = args.w2t.size(1), h = args.w2t.size(2);
  MOEFUSE_EXPECT(e >= 1 && e <= kGroupedGemmMaxExperts, "w2t",
                 "1 to " + std::to_string(kGroupedGemmMaxExperts) + " experts (dim 0)",
                 std::to_string(e));
  expect_extent(f, 8, "w2t", "F (dim 1)");
  expect_extent(h, 16, "w2t", "H (dim 2)");
  expect_aligned(args.w2t, "w2t");
  expect_tensor(args.w2t_scales, "w2t_scales", DType::kFloat32, device,
                {e, fp8_scale_groups(f), fp8_scale_groups(h)});
  expect_tensor(args.offsets, "offsets", DType::kInt32, device, {e + 1});
  expect_tensor(args.dys, "dys", DType::kFloat8E4M3, device, {kAnyExtent, h});
  expect_aligned(args.dys, "dys");
  const int64_t m = args.dys.size(0);
  MOEFUSE_EXPECT(m <= std::numeric_limits<int32_t>::max(), "dys", "rows below 2^31",
                 std::to_string(m));
  expect_tensor(args.dys_scales, "dys_scales", DType::kFloat32, device,
                {fp8_scale_groups(h), fp8_scale_rows(m)});
  expect_aligned(args.dys_scales, "dys_scales");
  const int64_t fc1 = is_glu(args.activation) ? 2 * f : f;
  expect_tensor(args.pre, "pre", DType::kBFloat16, device, {m, fc1});
  expect_aligned(args.pre, "pre");
  expect_tensor(args.d_pre, "d_pre", DType::kBFloat16, device, {m, fc1});
  expect_aligned(args.d_pre, "d_pre");
  if (!is_absent(args.row_scale))
    expect_tensor(args.row_scale, "row_scale", DType::kFloat32, device, {m});
  if (!is_absent(args.scaled_act)) {
    expect_tensor(args.scaled_act, "scaled_act", DType::kBFloat16, device, {m, f});
    expect_aligned(args.scaled_act, "scaled_act");
  }
  if (!is_absent(args.d_row_scale))
    expect_tensor(args.d_row_scale, "d_row_scale", DType::kFloat32, device, {m});
  if (!is_absent(args.b2)) {
    MOEFUSE_EXPECT(!is_absent(args.d_row_scale), "b2",
                   "absent unless d_row_scale is set (it only enters dp)", "a tensor");
    expect_tensor(args.b2, "b2", DType::kFloat32, device, {e, h});
  }
  MOEFUSE_EXPECT(is_absent(args.b2) == is_absent(args.dys_bf16), "dys_bf16",
                 "present exactly when b2 is (dp's bias term reads it)",
                 is_absent(args.dys_bf16) ? "absent" : "present without b2");
  if (!is_absent(args.dys_bf16)) {
    expect_tensor(args.dys_bf16, "dys_bf16", DType::kBFloat16, device, {m, h});
    expect_aligned(args.dys_bf16, "dys_bf16");
  }
  expect_fc2_dgrad_fp8_disjoint(args, {});
}

void expect_fc2_dgrad_fp8_disjoint(const Fc2DgradFp8Args& args, const NamedView& scratch) {
  const NamedView outputs[] = {scratch,
                               {args.d_pre, "d_pre"},
                               {args.scaled_act, "scaled_act"},
                               {args.d_row_scale, "d_row_scale"}};
  const NamedView inputs[] = {{args.dys, "dys"},           {args.dys_scales, "dys_scales"},
                              {args.w2t, "w2t"},           {args.w2t_scales, "w2t_scales"},
                              {args.offsets, "offsets"},   {args.pre, "pre"},
                              {args.row_scale, "row_scale"}, {args.b2, "b2"},
                              {args.dys_bf16, "dys_bf16"}};
  expect_outputs_disjoint(outputs, inputs);
}

}  // namespace moefuse
