// The public grouped GEMM API (moefuse/grouped_gemm.h): validation, then dispatch to the kernel
// instantiations (launch_*.cu) or to the unfused twin's kernels.
#include "moefuse/grouped_gemm.h"

#include <cstdint>
#include <cstring>
#include <limits>
#include <string>

#include "cuda/device.h"
#include "cuda/gemm/config.h"
#include "cuda/gemm/launch.h"
#include "moefuse/error.h"

namespace moefuse {
namespace {

void expect_int32_extent(int64_t v, std::string_view name, std::string_view what) {
  MOEFUSE_EXPECT(v <= std::numeric_limits<int32_t>::max(), name,
                 std::string(what) + " below 2^31", std::to_string(v));
}

gemm::EpilogueOp epilogue_op(const GroupedGemmArgs& args) {
  return args.epilogue == GemmEpilogue::kLinear ? gemm::EpilogueOp::kLinear
                                                : gemm::activation_epilogue_op(args.activation);
}

bool glu(const GroupedGemmArgs& args) {
  return args.epilogue == GemmEpilogue::kActivation && is_glu(args.activation);
}

// Problem and epilogue of the kernels from validated args.
gemm::GemmLaunch make_launch(const GroupedGemmArgs& args) {
  const GemmEpilogue kind = args.epilogue;
  gemm::GemmLaunch l;
  l.a = args.a.data;
  l.b = args.b.data;
  l.max_ctas = args.max_ctas;
  l.problem = gemm::GemmProblem{
      .offsets = args.offsets.as<const int>(),
      .num_experts = static_cast<int>(args.b.size(0)),
      .m_cap = static_cast<int>(args.d.size(0)),
      .n = static_cast<int>(args.b.size(1)),
      .k = static_cast<int>(args.b.size(2)),
      .n_out = static_cast<int>(args.d.size(1)),
      .d = args.d.data,
      .gather_x = !is_absent(args.gather_index) ? args.a.as<const __nv_bfloat16>() : nullptr,
      .gather_index = !is_absent(args.gather_index) ? args.gather_index.as<const int>() : nullptr,
      .gather_rows = !is_absent(args.gather_index) ? static_cast<int>(args.a.size(0)) : 0};
  l.epilogue = gemm::EpilogueParams{
      .op = epilogue_op(args),
      .clamp_alpha = args.clamped_swiglu.alpha,
      .clamp_limit = args.clamped_swiglu.limit,
      .bias = !is_absent(args.bias) ? args.bias.as<const float>() : nullptr,
      .row_scale = !is_absent(args.row_scale) ? args.row_scale.as<const float>() : nullptr,
      .pre = kind == GemmEpilogue::kActivation && !is_absent(args.pre_activation)
                 ? args.pre_activation.as<__nv_bfloat16>()
                 : nullptr};
  return l;
}

void launch_fused(const gemm::GemmLaunch& l, bool gather, DType out, cudaStream_t stream) {
  if (gather) gemm::launch_grouped_gemm_gather_bf16(l, stream);
  else if (out == DType::kFloat32) gemm::launch_grouped_gemm_fp32(l, stream);
  else if (gemm::narrow_width(l.problem.n)) gemm::launch_grouped_gemm_bf16_narrow(l, stream);
  else gemm::launch_grouped_gemm_bf16(l, stream);
}

}  // namespace

void validate_grouped_gemm(const GroupedGemmArgs& args) {
  const Device cuda = Device::kCuda;
  MOEFUSE_EXPECT(args.epilogue == GemmEpilogue::kLinear ||
                     args.epilogue == GemmEpilogue::kActivation,
                 "epilogue", "kLinear or kActivation",
                 std::to_string(static_cast<int>(args.epilogue)));
  epilogue_op(args);  // validates the activation
  MOEFUSE_EXPECT(args.max_ctas >= 0, "max_ctas", "0 (every SM) or a positive CTA count",
                 std::to_string(args.max_ctas));
  MOEFUSE_EXPECT(args.b.rank == 3, "b", "rank 3 [E, N, K]", "rank " + std::to_string(args.b.rank));
  const int64_t num_experts = args.b.size(0), n = args.b.size(1), k = args.b.size(2);
  expect_tensor(args.b, "b", DType::kBFloat16, cuda, {kAnyExtent, kAnyExtent, kAnyExtent});
  MOEFUSE_EXPECT(num_experts >= 1 && num_experts <= kGroupedGemmMaxExperts, "b",
                 "1 to " + std::to_string(kGroupedGemmMaxExperts) + " experts (dim 0)",
                 std::to_string(num_experts));
  MOEFUSE_EXPECT(k > 0 && k % 8 == 0, "b", "K (dim 2) > 0 and a multiple of 8 (TMA row stride)",
                 "K = " + std::to_string(k));
  const int64_t n_multiple = glu(args) ? 16 : 8;
  MOEFUSE_EXPECT(n > 0 && n % n_multiple == 0, "b",
                 "N (dim 1) > 0 and a multiple of " + std::to_string(n_multiple) +
                     (glu(args) ? " (GLU interleave)" : ""),
                 "N = " + std::to_string(n));
  expect_int32_extent(n, "b", "N");
  expect_int32_extent(k, "b", "K");
  expect_aligned(args.b, "b", 16);

  expect_tensor(args.offsets, "offsets", DType::kInt32, cuda, {num_experts + 1});

  const bool gather = !is_absent(args.gather_index);
  expect_tensor(args.a, "a", DType::kBFloat16, cuda, {kAnyExtent, k});
  expect_aligned(args.a, "a", 16);

  const int64_t n_out = glu(args) ? n / 2 : n;
  MOEFUSE_EXPECT(args.d.dtype == DType::kBFloat16 || args.d.dtype == DType::kFloat32, "d",
                 "dtype bf16 or fp32", "dtype " + std::string(dtype_name(args.d.dtype)));
  MOEFUSE_EXPECT(!gather || args.d.dtype == DType::kBFloat16, "d",
                 "dtype bf16 with gather_index (the only gather instantiation)",
                 "dtype " + std::string(dtype_name(args.d.dtype)));
  const int64_t m_cap = gather ? (args.d.rank == 2 ? args.d.size(0) : kAnyExtent) : args.a.size(0);
  expect_tensor(args.d, "d", args.d.dtype, cuda, {m_cap, n_out});
  expect_aligned(args.d, "d", 16);
  expect_int32_extent(args.d.size(0), "d", "rows");
  expect_int32_extent(args.a.size(0), "a", "rows");


  const int64_t rows = args.d.size(0);
  if (!is_absent(args.bias)) {
    expect_tensor(args.bias, "bias", DType::kFloat32, cuda, {num_experts, n});
    expect_aligned(args.bias, "bias", 16);
  }
  if (!is_absent(args.row_scale))
    expect_tensor(args.row_scale, "row_scale", DType::kFloat32, cuda, {rows});
  if (!is_absent(args.pre_activation)) {
    MOEFUSE_EXPECT(args.epilogue == GemmEpilogue::kActivation, "pre_activation",
                   "absent with GemmEpilogue::kLinear (h is D itself)", "a tensor");
    expect_tensor(args.pre_activation, "pre_activation", DType::kBFloat16, cuda, {rows, n});
    expect_aligned(args.pre_activation, "pre_activation", 16);
  }
  if (gather) expect_tensor(args.gather_index, "gather_index", DType::kInt32, cuda, {rows});
  const NamedView outputs[] = {{args.d, "d"}, {args.pre_activation, "pre_activation"}};
  const NamedView inputs[] = {{args.a, "a"},           {args.b, "b"},
                              {args.offsets, "offsets"}, {args.bias, "bias"},
                              {args.row_scale, "row_scale"}, {args.gather_index, "gather_index"}};
  expect_outputs_disjoint(outputs, inputs);
}

void grouped_gemm(const GroupedGemmArgs& args, cudaStream_t stream) {
  validate_grouped_gemm(args);
  cuda::expect_launchable(stream);
  launch_fused(make_launch(args), !is_absent(args.gather_index), args.d.dtype, stream);
}

void grouped_gemm_unfused(const GroupedGemmArgs& args, const GroupedGemmUnfusedScratch& scratch,
                          cudaStream_t stream) {
  validate_grouped_gemm(args);
  const bool gather = !is_absent(args.gather_index);
  const bool activation = args.epilogue == GemmEpilogue::kActivation;
  const int64_t rows = args.d.size(0), n = args.b.size(1), k = args.b.size(2);
  if (gather) {
    expect_tensor(scratch.gathered_a, "scratch.gathered_a", DType::kBFloat16, Device::kCuda,
                  {rows, k});
    expect_aligned(scratch.gathered_a, "scratch.gathered_a", 16);
  }
  if (activation)
    MOEFUSE_EXPECT(!is_absent(args.pre_activation), "pre_activation",
                   "a [M_cap, N] bf16 buffer (the unfused twin's intermediate)", "absent");
  cuda::expect_launchable(stream);

  gemm::GemmLaunch full = make_launch(args);
  if (gather) {
    gemm::launch_gather_rows(full.problem, scratch.gathered_a.as<__nv_bfloat16>(), stream);
  }
  // The plain GEMM: identity epilogue into h (pre_activation with an activation, else D).
  gemm::GemmLaunch plain = full;
  plain.a = gather ? scratch.gathered_a.data : args.a.data;
  plain.problem.gather_x = nullptr;
  plain.problem.gather_index = nullptr;
  plain.problem.gather_rows = 0;
  plain.epilogue = gemm::EpilogueParams{};
  if (activation) {
    plain.problem.d = args.pre_activation.data;
    plain.problem.n_out = static_cast<int>(n);
  }
  launch_fused(plain, /*gather=*/false, activation ? DType::kBFloat16 : args.d.dtype, stream);
  if (activation || full.epilogue.bias || full.epilogue.row_scale) {
    gemm::EpilogueParams ep = full.epilogue;
    ep.pre = activation ? args.pre_activation.as<__nv_bfloat16>() : nullptr;
    gemm::launch_epilogue_elementwise(full.problem, ep, args.d.dtype == DType::kFloat32, stream);
  }
}

GroupedGemmTile grouped_gemm_tile(int64_t n) {
  MOEFUSE_EXPECT(n > 0, "n", "a weight's column count > 0", std::to_string(n));
  using Wide = gemm::TileConfig<gemm::kBlockN>;
  using Narrow = gemm::TileConfig<gemm::kNarrowBlockN>;
  const bool narrow = gemm::narrow_width(n);
  return GroupedGemmTile{.block_m = gemm::kBlockM,
                         .block_n = narrow ? Narrow::kN : Wide::kN,
                         .block_k = gemm::kBlockK,
                         .stages = narrow ? Narrow::kStages : Wide::kStages};
}

namespace {

// Moves every row of `src` between the reference [gate; up] order and the interleaved order
// (glu_interleaved_row), in the direction `to_interleaved`.
void permute_glu_rows(const TensorView& src, const TensorView& dst, bool to_interleaved,
                      cudaStream_t stream) {
  MOEFUSE_EXPECT(src.rank == 2 || src.rank == 3, "src", "rank 3 [E, 2F, H] or rank 2 [E, 2F]",
                 "rank " + std::to_string(src.rank));
  MOEFUSE_EXPECT(src.dtype == DType::kBFloat16 || src.dtype == DType::kFloat32, "src",
                 "dtype bf16 or fp32", "dtype " + std::string(dtype_name(src.dtype)));
  const int64_t outer = src.size(0), rows = src.size(1), inner = src.rank == 3 ? src.size(2) : 1;
  MOEFUSE_EXPECT(rows % (2 * kGluInterleave) == 0, "src",
                 "2F (dim 1) a multiple of " + std::to_string(2 * kGluInterleave),
                 "2F = " + std::to_string(rows));
  if (src.rank == 3) {
    expect_tensor(src, "src", src.dtype, src.device, {outer, rows, inner});
    expect_tensor(dst, "dst", src.dtype, src.device, {outer, rows, inner});
  } else {
    expect_tensor(src, "src", src.dtype, src.device, {outer, rows});
    expect_tensor(dst, "dst", src.dtype, src.device, {outer, rows});
  }
  expect_disjoint(dst, "dst", src, "src");
  const int64_t row_bytes = inner * dtype_bits(src.dtype) / 8;
  const int64_t total_bytes = outer * rows * row_bytes;
  const auto* s = static_cast<const uint8_t*>(src.data);
  auto* d = static_cast<uint8_t*>(dst.data);
  if (total_bytes == 0) return;
  const int64_t ffn = rows / 2;
  if (src.device == Device::kCpu) {
    for (int64_t o = 0; o < outer; ++o)
      for (int64_t r = 0; r < rows; ++r) {
        const int64_t from = to_interleaved ? r : glu_interleaved_row(r, ffn);
        const int64_t to = to_interleaved ? glu_interleaved_row(r, ffn) : r;
        std::memcpy(d + (o * rows + to) * row_bytes, s + (o * rows + from) * row_bytes,
                    static_cast<size_t>(row_bytes));
      }
    return;
  }
  cuda::expect_launchable(stream);
  gemm::launch_permute_glu_rows(src.data, dst.data, outer, ffn, row_bytes, to_interleaved,
                                stream);
}

}  // namespace

void interleave_glu_weight(const TensorView& src, const TensorView& dst, cudaStream_t stream) {
  permute_glu_rows(src, dst, /*to_interleaved=*/true, stream);
}

void deinterleave_glu_weight(const TensorView& src, const TensorView& dst, cudaStream_t stream) {
  permute_glu_rows(src, dst, /*to_interleaved=*/false, stream);
}

namespace gemm {

EpilogueOp activation_epilogue_op(Activation a) {
  switch (a) {
    case Activation::kSwiGLU: return EpilogueOp::kSwiGLU;
    case Activation::kGeGLU: return EpilogueOp::kGeGLU;
    case Activation::kReGLU: return EpilogueOp::kReGLU;
    case Activation::kSquaredReLU: return EpilogueOp::kSquaredReLU;
    case Activation::kClampedSwiGLU: return EpilogueOp::kClampedSwiGLU;
  }
  throw InvalidArgument("activation", "a moefuse::Activation",
                        std::to_string(static_cast<int>(a)));
}

}  // namespace gemm
}  // namespace moefuse
