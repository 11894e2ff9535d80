// Argument checks of the column-wise grouped quantiser and the FP8 k-grouped wgrad
// (moefuse/grouped_gemm_fp8_wgrad.h), shared by the GPU entry points (Device::kCuda) and the CPU
// references (Device::kCpu).
#include <cstdint>
#include <limits>
#include <string>

#include "cuda/gemm/expert_offsets.h"
#include "cuda/gemm/row_length.h"
#include "moefuse/error.h"
#include "moefuse/grouped_gemm_fp8_wgrad.h"

namespace moefuse {
namespace {

using gemm::expect_expert_offsets;
using gemm::expect_row_length;

// Groups G of a column-wise operand [N, 128 G] (named `name`), G below 2^31 / 128 columns.
int64_t expect_colwise_groups(const TensorView& t, std::string_view name, Device device) {
  MOEFUSE_EXPECT(t.rank == 2, name, "rank 2 [N, 128 G]", "rank " + std::to_string(t.rank));
  expect_tensor(t, name, DType::kFloat8E4M3, device, {kAnyExtent, kAnyExtent});
  const int64_t cols = t.size(1);
  MOEFUSE_EXPECT(cols % kFp8ScaleGroup == 0 && cols <= std::numeric_limits<int32_t>::max(), name,
                 "columns (dim 1) a multiple of 128 below 2^31", std::to_string(cols));
  expect_row_length(t.size(0), name, "N (dim 0)");
  expect_aligned(t, name);
  return cols / kFp8ScaleGroup;
}

}  // namespace

void validate_quantize_fp8_colwise_grouped(const TensorView& x, const TensorView& offsets,
                                           const TensorView& xt, const TensorView& scales,
                                           Device device, DType x_dtype,
                                           const TensorView* gather_index) {
  const bool gather = gather_index != nullptr;
  MOEFUSE_EXPECT(x.rank == 2, "x", gather ? "rank 2 [T, N]" : "rank 2 [M_cap, N]",
                 "rank " + std::to_string(x.rank));
  expect_tensor(x, "x", x_dtype, device, {kAnyExtent, kAnyExtent});
  const int64_t n = x.size(1);
  expect_row_length(n, "x", "N (dim 1)");
  MOEFUSE_EXPECT(x.size(0) <= std::numeric_limits<int32_t>::max(), "x", "rows below 2^31",
                 std::to_string(x.size(0)));
  expect_aligned(x, "x");
  const TensorView index = gather ? *gather_index : TensorView{};
  if (gather) {
    MOEFUSE_EXPECT(index.rank == 1, "gather_index", "rank 1 [M_cap]",
                   "rank " + std::to_string(index.rank));
    expect_tensor(index, "gather_index", DType::kInt32, device, {kAnyExtent});
    MOEFUSE_EXPECT(index.size(0) <= std::numeric_limits<int32_t>::max(), "gather_index",
                   "M_cap below 2^31", std::to_string(index.size(0)));
  }
  const int64_t m_cap = gather ? index.size(0) : x.size(0);
  const int64_t experts = expect_expert_offsets(offsets, device);
  const int64_t groups = fp8_colwise_groups(m_cap, experts);
  MOEFUSE_EXPECT(groups * kFp8ScaleGroup <= std::numeric_limits<int32_t>::max(),
                 gather ? "gather_index" : "x", "M_cap + 127 E below 2^31",
                 std::to_string(m_cap));
  expect_tensor(xt, "xt", DType::kFloat8E4M3, device, {n, groups * kFp8ScaleGroup});
  expect_aligned(xt, "xt");
  expect_tensor(scales, "scales", DType::kFloat32, device, {groups, n});
  expect_aligned(scales, "scales");
  const NamedView outputs[] = {{xt, "xt"}, {scales, "scales"}};
  const NamedView inputs[] = {{x, "x"}, {offsets, "offsets"}, {index, "gather_index"}};
  expect_outputs_disjoint(outputs, inputs);
}

void validate_quantize_fp8_rowcol_grouped(const TensorView& x, const TensorView& offsets,
                                          const TensorView& xt, const TensorView& scales,
                                          const TensorView& q_rows,
                                          const TensorView& q_rows_scales, Device device,
                                          DType x_dtype) {
  validate_quantize_fp8_colwise_grouped(x, offsets, xt, scales, device, x_dtype);
  const int64_t m_cap = x.size(0), n = x.size(1);
  expect_tensor(q_rows, "q_rows", DType::kFloat8E4M3, device, {m_cap, n});
  expect_aligned(q_rows, "q_rows");
  expect_tensor(q_rows_scales, "q_rows_scales", DType::kFloat32, device,
                {fp8_scale_groups(n), fp8_scale_rows(m_cap)});
  expect_aligned(q_rows_scales, "q_rows_scales");
  const NamedView outputs[] = {
      {xt, "xt"}, {scales, "scales"}, {q_rows, "q_rows"}, {q_rows_scales, "q_rows_scales"}};
  const NamedView inputs[] = {{x, "x"}, {offsets, "offsets"}};
  expect_outputs_disjoint(outputs, inputs);
}

void validate_grouped_gemm_fp8_wgrad(const GroupedGemmFp8WgradArgs& args, Device device) {
  const int64_t groups = expect_colwise_groups(args.at, "at", device);
  const int64_t n_a = args.at.size(0);
  expect_tensor(args.bt, "bt", DType::kFloat8E4M3, device, {kAnyExtent, groups * kFp8ScaleGroup});
  expect_colwise_groups(args.bt, "bt", device);
  const int64_t n_b = args.bt.size(0);
  expect_tensor(args.a_scales, "a_scales", DType::kFloat32, device, {groups, n_a});
  expect_aligned(args.a_scales, "a_scales");
  expect_tensor(args.b_scales, "b_scales", DType::kFloat32, device, {groups, n_b});
  expect_aligned(args.b_scales, "b_scales");
  const int64_t experts = expect_expert_offsets(args.offsets, device);
  MOEFUSE_EXPECT(args.d.dtype == DType::kFloat32 || args.d.dtype == DType::kBFloat16, "d",
                 "dtype fp32 or bf16", "dtype " + std::string(dtype_name(args.d.dtype)));
  expect_tensor(args.d, "d", args.d.dtype, device, {experts, n_a, n_b});
  expect_aligned(args.d, "d");
  MOEFUSE_EXPECT(!args.accumulate || args.d.dtype == DType::kFloat32, "accumulate",
                 "false unless d is fp32 (main-grad accumulation)", "true with bf16 d");
  // With accumulate d is read and written in place, which is no overlap with another operand.
  const NamedView outputs[] = {{args.d, "d"}};
  const NamedView inputs[] = {{args.at, "at"},           {args.a_scales, "a_scales"},
                              {args.bt, "bt"},           {args.b_scales, "b_scales"},
                              {args.offsets, "offsets"}};
  expect_outputs_disjoint(outputs, inputs);
}

}  // namespace moefuse
