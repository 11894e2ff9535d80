// The public backward grouped-GEMM API (moefuse/grouped_gemm_backward.h): validation, then
// dispatch to the kernels (launch_*.cu, elementwise.cu).
#include "moefuse/grouped_gemm_backward.h"

#include <cstdint>
#include <initializer_list>
#include <limits>
#include <string>
#include <vector>

#include "cuda/device.h"
#include "cuda/dispatch/dispatch_args.h"
#include "cuda/gemm/backward/config.h"
#include "cuda/gemm/backward/fc2_dgrad_checks.h"
#include "cuda/gemm/backward/launch.h"
#include "cuda/gemm/backward/segment_sums.h"
#include "cuda/gemm/launch.h"
#include "cuda/gemm/row_length.h"
#include "cuda/gemm/tile_scheduler.h"
#include "cuda/router/checks.h"
#include "moefuse/error.h"

namespace moefuse {
namespace {

using gemm::expect_row_length;

void expect_rows(const TensorView& t, std::string_view name) {
  MOEFUSE_EXPECT(t.size(0) <= std::numeric_limits<int32_t>::max(), name, "rows below 2^31",
                 std::to_string(t.size(0)));
}

int64_t expect_experts(int64_t e, std::string_view name) {
  MOEFUSE_EXPECT(e >= 1 && e <= kGroupedGemmMaxExperts, name,
                 "1 to " + std::to_string(kGroupedGemmMaxExperts) + " experts (dim 0)",
                 std::to_string(e));
  return e;
}

// The FC2 dgrad's outputs (and the scratch the call writes too: pass empty ones to check the
// arguments alone) against each other and every input.
void expect_fc2_disjoint(const Fc2DgradArgs& args, std::initializer_list<NamedView> scratch) {
  std::vector<NamedView> outputs = scratch;  // first, so that an overlap names the scratch
  outputs.insert(outputs.end(), {{args.d_pre, "d_pre"},
                                 {args.scaled_act, "scaled_act"},
                                 {args.d_row_scale, "d_row_scale"},
                                 {args.d_b2, "d_b2"}});
  const NamedView inputs[] = {{args.dys, "dys"}, {args.w2, "w2"},
                              {args.offsets, "offsets"}, {args.pre, "pre"},
                              {args.row_scale, "row_scale"}, {args.b2, "b2"}};
  expect_outputs_disjoint(outputs, inputs);
}

// The wgrad's d (and the unfused twin's scratch) against every input. With accumulate d is read
// and written in place by the same thread, which is not an overlap with another operand.
void expect_wgrad_disjoint(const GroupedGemmWgradArgs& args, const NamedView& scratch) {
  const NamedView outputs[] = {scratch, {args.d, "d"}};
  const NamedView inputs[] = {{args.a, "a"}, {args.b, "b"}, {args.offsets, "offsets"},
                              {args.gather_index, "gather_index"}};
  expect_outputs_disjoint(outputs, inputs);
}

// Asked for: any of its views given (a view of T = 0 tokens has no data but a shape).
bool has_permute(const GroupedGemmDgradArgs::Permute& p) {
  return p.x.rank != 0 || p.row_of.rank != 0 || p.token_of_row.rank != 0 || p.xs.rank != 0;
}

// The side permute's device view of validated views (none when absent or without rows).
gemm::bwd::SidePermute side_permute(const GroupedGemmDgradArgs::Permute& p) {
  if (!has_permute(p) || p.xs.numel() == 0) return {};
  return {.x = p.x.as<const uint4>(),
          .row_of = p.row_of.as<const int32_t>(),
          .token_of_row = p.token_of_row.as<const int32_t>(),
          .xs = p.xs.as<uint4>(),
          .tokens = static_cast<int>(p.x.size(0)),
          .top_k = static_cast<int>(p.row_of.size(1)),
          .rows = static_cast<int>(p.xs.size(0)),
          .vecs = static_cast<int>(p.x.size(1) / 8),
          .health = cuda::expect_health(p.health)};
}

gemm::bwd::DgradLaunch dgrad_launch(const GroupedGemmDgradArgs& args) {
  return gemm::bwd::DgradLaunch{
      .problem = {.offsets = args.offsets.as<const int>(),
                  .num_experts = static_cast<int>(args.b.size(0)),
                  .m_cap = static_cast<int>(args.a.size(0)),
                  .n = static_cast<int>(args.b.size(2)),
                  .k = static_cast<int>(args.b.size(1)),
                  .d = args.d.data,
                  .d_fp32 = args.d.dtype == DType::kFloat32,
                  .permute = side_permute(args.permute)},
      .dglu = {},
      .a = args.a.data,
      .b = args.b.data,
      .max_ctas = args.max_ctas};
}

// The FC2 dgrad's epilogue parameters and dp reduction from validated args.
gemm::bwd::DGluEpilogue dglu_epilogue(const Fc2DgradArgs& args, float* dp_partial) {
  return gemm::bwd::DGluEpilogue{
      .act = {.op = gemm::activation_epilogue_op(args.activation),
              .clamp_alpha = args.clamped_swiglu.alpha,
              .clamp_limit = args.clamped_swiglu.limit},
      .pre = args.pre.as<const __nv_bfloat16>(),
      .d_pre = args.d_pre.as<__nv_bfloat16>(),
      .scaled_act = !is_absent(args.scaled_act) ? args.scaled_act.as<__nv_bfloat16>() : nullptr,
      .row_scale = !is_absent(args.row_scale) ? args.row_scale.as<const float>() : nullptr,
      .dp_partial = dp_partial,
      .dp_stride = static_cast<int>(fc2_dgrad_dp_blocks(args.w2.size(2)))};
}

gemm::bwd::DpReduce dp_reduce(const Fc2DgradArgs& args, const float* dp_partial) {
  return gemm::bwd::DpReduce{
      .offsets = args.offsets.as<const int>(),
      .num_experts = static_cast<int>(args.w2.size(0)),
      .m_cap = static_cast<int>(args.dys.size(0)),
      .hidden = static_cast<int>(args.w2.size(1)),
      .dp_partial = dp_partial,
      .dp_stride = static_cast<int>(fc2_dgrad_dp_blocks(args.w2.size(2))),
      .dp_blocks = gemm::ceil_div(static_cast<int>(args.w2.size(2)),
                                  gemm::bwd::dglu_block_n(args.w2.size(1))),
      .dys = args.dys.as<const __nv_bfloat16>(),
      .b2 = !is_absent(args.b2) ? args.b2.as<const float>() : nullptr,
      .dp = !is_absent(args.d_row_scale) ? args.d_row_scale.as<float>() : nullptr};
}

// d_b2's column sums (if asked) and, with `dot_partial`, the dots of dp's b2 term.
gemm::bwd::SegmentSums bias_sums(const Fc2DgradArgs& args, const Fc2DgradScratch& scratch,
                                 float* dot_partial) {
  return gemm::bwd::SegmentSums{
      .a = args.dys.as<const __nv_bfloat16>(),
      .offsets = args.offsets.as<const int>(),
      .num_experts = static_cast<int>(args.w2.size(0)),
      .m_cap = static_cast<int>(args.dys.size(0)),
      .cols = static_cast<int>(args.w2.size(1)),
      .row_weight = !is_absent(args.row_scale) ? args.row_scale.as<const float>() : nullptr,
      .sums = !is_absent(args.d_b2) ? args.d_b2.as<float>() : nullptr,
      .accumulate = args.accumulate_d_b2,
      .unit_sums = !is_absent(args.d_b2) ? scratch.d_b2_units.as<float>() : nullptr,
      .dot_with = dot_partial ? args.b2.as<const float>() : nullptr,
      .dot_partial = dot_partial};
}

GroupedGemmDgradArgs fc2_plain_dgrad(const Fc2DgradArgs& args, const TensorView& g) {
  return GroupedGemmDgradArgs{.a = args.dys,
                              .b = args.w2,
                              .offsets = args.offsets,
                              .d = g,
                              .max_ctas = args.max_ctas,
                              .permute = {}};
}

gemm::bwd::WgradLaunch wgrad_launch(const GroupedGemmWgradArgs& args) {
  const bool gather = !is_absent(args.gather_index);
  const int64_t rows = args.a.size(0);
  return gemm::bwd::WgradLaunch{
      .problem = {.offsets = args.offsets.as<const int>(),
                  .num_experts = static_cast<int>(args.d.size(0)),
                  .m_cap = static_cast<int>(rows),
                  .m_out = static_cast<int>(args.d.size(1)),
                  .n_out = static_cast<int>(args.d.size(2)),
                  .d = args.d.data,
                  .d_fp32 = args.d.dtype == DType::kFloat32,
                  .accumulate = args.accumulate,
                  .gather_x = gather ? args.b.as<const __nv_bfloat16>() : nullptr,
                  .gather_index = gather ? args.gather_index.as<const int>() : nullptr,
                  .gather_rows = gather ? static_cast<int>(args.b.size(0)) : 0},
      .a = args.a.data,
      .b = args.b.data,
      .max_ctas = args.max_ctas};
}

}  // namespace

// ---- dgrad ---------------------------------------------------------------------------------

void validate_grouped_gemm_dgrad(const GroupedGemmDgradArgs& args) {
  const Device cuda = Device::kCuda;
  MOEFUSE_EXPECT(args.max_ctas >= 0, "max_ctas", "0 (every SM) or a positive CTA count",
                 std::to_string(args.max_ctas));
  MOEFUSE_EXPECT(args.b.rank == 3, "b", "rank 3 [E, K, N]", "rank " + std::to_string(args.b.rank));
  expect_tensor(args.b, "b", DType::kBFloat16, cuda, {kAnyExtent, kAnyExtent, kAnyExtent});
  const int64_t e = expect_experts(args.b.size(0), "b"), k = args.b.size(1), n = args.b.size(2);
  expect_row_length(k, "b", "K (dim 1)");
  expect_row_length(n, "b", "N (dim 2)");
  expect_aligned(args.b, "b");
  expect_tensor(args.offsets, "offsets", DType::kInt32, cuda, {e + 1});
  expect_tensor(args.a, "a", DType::kBFloat16, cuda, {kAnyExtent, k});
  expect_aligned(args.a, "a");
  expect_rows(args.a, "a");
  MOEFUSE_EXPECT(args.d.dtype == DType::kBFloat16 || args.d.dtype == DType::kFloat32, "d",
                 "dtype bf16 or fp32", "dtype " + std::string(dtype_name(args.d.dtype)));
  expect_tensor(args.d, "d", args.d.dtype, cuda, {args.a.size(0), n});
  expect_aligned(args.d, "d");
  const GroupedGemmDgradArgs::Permute& pm = args.permute;
  if (has_permute(pm)) {
    // Run and tested beside the bf16 store only (the layer's dxs); the fp32 store's two-part
    // hand-off would run the same pieces, but no GPU run has checked it.
    MOEFUSE_EXPECT(args.d.dtype == DType::kBFloat16, "permute", "absent unless d is bf16",
                   "given with d " + std::string(dtype_name(args.d.dtype)));
    for (const NamedView& v : {NamedView{pm.x, "permute.x"}, NamedView{pm.row_of, "permute.row_of"},
                               NamedView{pm.token_of_row, "permute.token_of_row"},
                               NamedView{pm.xs, "permute.xs"}})
      MOEFUSE_EXPECT(v.view.rank != 0, v.name,
                     "given (permute's x, row_of, token_of_row and xs go together)", "absent");
    try {  // permute's own checks, their argument named as a member of `permute`
      cuda::check_permute(pm.x, pm.row_of, pm.token_of_row, pm.xs);
      cuda::expect_health(pm.health);
    } catch (const InvalidArgument& e) {
      throw InvalidArgument("permute." + e.argument(), e.expected(), e.actual());
    }
  }
  const NamedView outputs[] = {{args.d, "d"}, {pm.xs, "permute.xs"}};
  const NamedView inputs[] = {{args.a, "a"},
                              {args.b, "b"},
                              {args.offsets, "offsets"},
                              {pm.x, "permute.x"},
                              {pm.row_of, "permute.row_of"},
                              {pm.token_of_row, "permute.token_of_row"}};
  expect_outputs_disjoint(outputs, inputs);
}

void grouped_gemm_dgrad(const GroupedGemmDgradArgs& args, cudaStream_t stream) {
  validate_grouped_gemm_dgrad(args);
  cuda::expect_launchable(stream);
  gemm::bwd::launch_dgrad(dgrad_launch(args), stream);
}

// ---- FC2 dgrad + activation backward ------------------------------------------------------

// One partial per (row, n-block) of the dGLU dgrad's tiles, for the narrower of its shapes.
int64_t fc2_dgrad_dp_blocks(int64_t ffn) {
  return (ffn + gemm::bwd::kGluBlockN - 1) / gemm::bwd::kGluBlockN;
}

int64_t fc2_dgrad_bias_pieces(int64_t hidden) { return gemm::bwd::segment_pieces(hidden); }

int64_t fc2_dgrad_d_b2_units(int64_t m_cap, int64_t experts) {
  return gemm::bwd::segment_units_cap(m_cap, experts);
}

void gemm::bwd::expect_d_b2_units(const TensorView& d_b2, const TensorView& d_b2_units,
                                  int64_t m_cap, int64_t experts, int64_t hidden) {
  if (is_absent(d_b2)) {
    MOEFUSE_EXPECT(is_absent(d_b2_units), "scratch.d_b2_units", "empty unless d_b2 is set",
                   "a tensor");
    return;
  }
  expect_tensor(d_b2_units, "scratch.d_b2_units", DType::kFloat32, Device::kCuda,
                {fc2_dgrad_d_b2_units(m_cap, experts), hidden});
}

void validate_fc2_dgrad(const Fc2DgradArgs& args) {
  const Device cuda = Device::kCuda;
  MOEFUSE_EXPECT(args.max_ctas >= 0, "max_ctas", "0 (every SM) or a positive CTA count",
                 std::to_string(args.max_ctas));
  gemm::activation_epilogue_op(args.activation);  // validates the enum
  MOEFUSE_EXPECT(args.w2.rank == 3, "w2", "rank 3 [E, H, F]",
                 "rank " + std::to_string(args.w2.rank));
  expect_tensor(args.w2, "w2", DType::kBFloat16, cuda, {kAnyExtent, kAnyExtent, kAnyExtent});
  const int64_t e = expect_experts(args.w2.size(0), "w2"), h = args.w2.size(1),
                f = args.w2.size(2);
  expect_row_length(h, "w2", "H (dim 1)");
  expect_row_length(f, "w2", "F (dim 2)");
  expect_aligned(args.w2, "w2");
  expect_tensor(args.offsets, "offsets", DType::kInt32, cuda, {e + 1});
  expect_tensor(args.dys, "dys", DType::kBFloat16, cuda, {kAnyExtent, h});
  expect_aligned(args.dys, "dys");
  expect_rows(args.dys, "dys");
  const int64_t m = args.dys.size(0), fc1 = is_glu(args.activation) ? 2 * f : f;
  expect_tensor(args.pre, "pre", DType::kBFloat16, cuda, {m, fc1});
  expect_aligned(args.pre, "pre");
  expect_tensor(args.d_pre, "d_pre", DType::kBFloat16, cuda, {m, fc1});
  expect_aligned(args.d_pre, "d_pre");
  if (!is_absent(args.row_scale))
    expect_tensor(args.row_scale, "row_scale", DType::kFloat32, cuda, {m});
  if (!is_absent(args.scaled_act)) {
    expect_tensor(args.scaled_act, "scaled_act", DType::kBFloat16, cuda, {m, f});
    expect_aligned(args.scaled_act, "scaled_act");
  }
  if (!is_absent(args.d_row_scale))
    expect_tensor(args.d_row_scale, "d_row_scale", DType::kFloat32, cuda, {m});
  if (!is_absent(args.b2)) {
    MOEFUSE_EXPECT(!is_absent(args.d_row_scale), "b2",
                   "absent unless d_row_scale is set (it only enters dp)", "a tensor");
    expect_tensor(args.b2, "b2", DType::kFloat32, cuda, {e, h});
    expect_aligned(args.b2, "b2");
  }
  if (!is_absent(args.d_b2)) {
    expect_tensor(args.d_b2, "d_b2", DType::kFloat32, cuda, {e, h});
    expect_aligned(args.d_b2, "d_b2");
  }
  MOEFUSE_EXPECT(!args.accumulate_d_b2 || !is_absent(args.d_b2), "accumulate_d_b2",
                 "false unless d_b2 is set", "true");
  expect_fc2_disjoint(args, {});
}

void grouped_gemm_fc2_dgrad(const Fc2DgradArgs& args, const Fc2DgradScratch& scratch,
                            cudaStream_t stream) {
  validate_fc2_dgrad(args);
  const bool dp = !is_absent(args.d_row_scale);
  if (dp) {
    expect_tensor(scratch.dp_partial, "scratch.dp_partial", DType::kFloat32, Device::kCuda,
                  {args.dys.size(0), fc2_dgrad_dp_blocks(args.w2.size(2))});
  }
  const bool bias_partial = !is_absent(scratch.bias_partial);
  if (bias_partial) {
    MOEFUSE_EXPECT(!is_absent(args.b2), "scratch.bias_partial", "empty unless b2 is set",
                   "a tensor");
    expect_tensor(scratch.bias_partial, "scratch.bias_partial", DType::kFloat32, Device::kCuda,
                  {fc2_dgrad_bias_pieces(args.w2.size(1)), args.dys.size(0)});
  }
  gemm::bwd::expect_d_b2_units(args.d_b2, scratch.d_b2_units, args.dys.size(0), args.w2.size(0),
                               args.w2.size(1));
  expect_fc2_disjoint(args, {{scratch.dp_partial, "scratch.dp_partial"},
                             {scratch.bias_partial, "scratch.bias_partial"},
                             {scratch.d_b2_units, "scratch.d_b2_units"}});
  cuda::expect_launchable(stream);
  float* partial = dp ? scratch.dp_partial.as<float>() : nullptr;
  gemm::bwd::DgradLaunch l = dgrad_launch(fc2_plain_dgrad(args, TensorView{}));
  l.dglu = dglu_epilogue(args, partial);
  gemm::bwd::launch_dgrad(l, stream);
  // d_b2 and the dots of dp's b2 term in one pass over dys.
  gemm::bwd::launch_segment_sums(
      bias_sums(args, scratch, bias_partial ? scratch.bias_partial.as<float>() : nullptr),
      stream);
  if (!dp) return;
  gemm::bwd::DpReduce r = dp_reduce(args, partial);
  if (bias_partial) {
    r.bias_partial = scratch.bias_partial.as<const float>();
    r.bias_pieces = static_cast<int>(fc2_dgrad_bias_pieces(args.w2.size(1)));
  }
  gemm::bwd::launch_dp_reduce(r, stream);
}

void grouped_gemm_fc2_dgrad_unfused(const Fc2DgradArgs& args, const Fc2DgradScratch& scratch,
                                    cudaStream_t stream) {
  validate_fc2_dgrad(args);
  MOEFUSE_EXPECT(is_absent(scratch.bias_partial), "scratch.bias_partial",
                 "an empty view (the unfused twin reads dys for dp's b2 term)", "a tensor");
  expect_tensor(scratch.g, "scratch.g", DType::kBFloat16, Device::kCuda,
                {args.dys.size(0), args.w2.size(2)});
  expect_aligned(scratch.g, "scratch.g");
  gemm::bwd::expect_d_b2_units(args.d_b2, scratch.d_b2_units, args.dys.size(0), args.w2.size(0),
                               args.w2.size(1));
  expect_fc2_disjoint(args,
                      {{scratch.g, "scratch.g"}, {scratch.d_b2_units, "scratch.d_b2_units"}});
  cuda::expect_launchable(stream);
  const gemm::bwd::DgradLaunch plain = dgrad_launch(fc2_plain_dgrad(args, scratch.g));
  gemm::bwd::launch_dgrad(plain, stream);
  gemm::bwd::launch_dglu_elementwise(plain.problem, dglu_epilogue(args, nullptr),
                                     scratch.g.as<const __nv_bfloat16>(),
                                     dp_reduce(args, nullptr), stream);
  gemm::bwd::launch_segment_sums(bias_sums(args, scratch, nullptr), stream);
}

// ---- wgrad ---------------------------------------------------------------------------------

void validate_grouped_gemm_wgrad(const GroupedGemmWgradArgs& args) {
  const Device cuda = Device::kCuda;
  MOEFUSE_EXPECT(args.max_ctas >= 0, "max_ctas", "0 (every SM) or a positive CTA count",
                 std::to_string(args.max_ctas));
  MOEFUSE_EXPECT(args.d.rank == 3, "d", "rank 3 [E, M_out, N_out]",
                 "rank " + std::to_string(args.d.rank));
  MOEFUSE_EXPECT(args.d.dtype == DType::kBFloat16 || args.d.dtype == DType::kFloat32, "d",
                 "dtype bf16 or fp32", "dtype " + std::string(dtype_name(args.d.dtype)));
  expect_tensor(args.d, "d", args.d.dtype, cuda, {kAnyExtent, kAnyExtent, kAnyExtent});
  const int64_t e = expect_experts(args.d.size(0), "d"), m_out = args.d.size(1),
                n_out = args.d.size(2);
  expect_row_length(m_out, "d", "M_out (dim 1)");
  expect_row_length(n_out, "d", "N_out (dim 2)");
  expect_aligned(args.d, "d");
  MOEFUSE_EXPECT(!args.accumulate || args.d.dtype == DType::kFloat32, "accumulate",
                 "false unless d is fp32 (main-grad accumulation)", "true with bf16 d");
  expect_tensor(args.offsets, "offsets", DType::kInt32, cuda, {e + 1});
  expect_tensor(args.a, "a", DType::kBFloat16, cuda, {kAnyExtent, m_out});
  expect_aligned(args.a, "a");
  expect_rows(args.a, "a");
  const bool gather = !is_absent(args.gather_index);
  expect_tensor(args.b, "b", DType::kBFloat16, cuda, {gather ? kAnyExtent : args.a.size(0), n_out});
  expect_aligned(args.b, "b");
  expect_rows(args.b, "b");
  if (gather) expect_tensor(args.gather_index, "gather_index", DType::kInt32, cuda, {args.a.size(0)});
  expect_wgrad_disjoint(args, {});
}

void grouped_gemm_wgrad(const GroupedGemmWgradArgs& args, cudaStream_t stream) {
  validate_grouped_gemm_wgrad(args);
  cuda::expect_launchable(stream);
  const gemm::bwd::WgradLaunch l = wgrad_launch(args);
  if (!is_absent(args.gather_index)) gemm::bwd::launch_wgrad_gather(l, stream);
  else gemm::bwd::launch_wgrad(l, stream);
}

void grouped_gemm_wgrad_unfused(const GroupedGemmWgradArgs& args,
                                const GroupedGemmWgradUnfusedScratch& scratch,
                                cudaStream_t stream) {
  validate_grouped_gemm_wgrad(args);
  const bool gathers = !is_absent(args.gather_index);
  if (gathers) {
    expect_tensor(scratch.gathered_b, "scratch.gathered_b", DType::kBFloat16, Device::kCuda,
                  {args.a.size(0), args.d.size(2)});
    expect_aligned(scratch.gathered_b, "scratch.gathered_b");
    expect_wgrad_disjoint(args, {scratch.gathered_b, "scratch.gathered_b"});
  }
  cuda::expect_launchable(stream);
  gemm::bwd::WgradLaunch l = wgrad_launch(args);
  if (gathers) {
    // The forward's gather kernel: rows [offsets[0], offsets[E]) of gathered_b = x[index[r]].
    const gemm::GemmProblem gather{.offsets = l.problem.offsets,
                                   .num_experts = l.problem.num_experts,
                                   .m_cap = l.problem.m_cap,
                                   .k = l.problem.n_out,
                                   .gather_x = l.problem.gather_x,
                                   .gather_index = l.problem.gather_index,
                                   .gather_rows = l.problem.gather_rows};
    gemm::launch_gather_rows(gather, scratch.gathered_b.as<__nv_bfloat16>(), stream);
    l.b = scratch.gathered_b.data;
    l.problem.gather_x = nullptr;
    l.problem.gather_index = nullptr;
    l.problem.gather_rows = 0;
  }
  gemm::bwd::launch_wgrad(l, stream);
}

}  // namespace moefuse
