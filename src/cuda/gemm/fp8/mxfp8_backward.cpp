// The MXFP8 backward grouped GEMMs (moefuse/grouped_gemm_mxfp8_backward.h): the operands' checks,
// their dequantisation into the workspace, then the BF16 call on the copies.
#include "moefuse/grouped_gemm_mxfp8_backward.h"

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "cuda/device.h"
#include "cuda/gemm/backward/fc2_dgrad_checks.h"
#include "cuda/gemm/expert_offsets.h"
#include "cuda/gemm/fp8/mxfp8_emulation.h"
#include "cuda/quant/mxfp8_cols.h"
#include "cuda/router/checks.h"
#include "moefuse/error.h"
#include "moefuse/grouped_gemm_fp8.h"
#include "moefuse/quant.h"

namespace moefuse {
namespace {

// How an operand is quantised (the header's three layouts).
enum class Layout { kRows, kWeights, kGrouped };

struct OperandNames {
  std::string_view codes, scales;
};

// An operand's codes and scales in `layout`; `experts` (the call's E) sizes a grouped operand's
// scales.
void expect_operand(const Mxfp8Operand& op, Layout layout, OperandNames names, int64_t experts) {
  const TensorView& c = op.codes;
  constexpr int64_t kAny = kAnyExtent;
  if (layout == Layout::kWeights)
    expect_tensor(c, names.codes, DType::kFloat8E4M3, Device::kCuda, {kAny, kAny, kAny});
  else
    expect_tensor(c, names.codes, DType::kFloat8E4M3, Device::kCuda, {kAny, kAny});
  expect_aligned(c, names.codes);
  if (layout != Layout::kGrouped) {
    const int64_t k = c.size(1);  // [M_cap, K] or [E, K, N]
    MOEFUSE_EXPECT(k > 0 && k % kMxfp8ScaleGroup == 0, names.codes,
                   "a K extent (dim 1) that is a positive multiple of 32 (whole MX blocks)",
                   "shape " + shape_string(c));
  }
  switch (layout) {
    case Layout::kRows:
      expect_tensor(op.scales, names.scales, DType::kFloat8E8M0, Device::kCuda,
                    {c.size(1) / kMxfp8ScaleGroup, mxfp8_scale_rows(c.size(0))});
      break;
    case Layout::kWeights:
      expect_tensor(op.scales, names.scales, DType::kFloat8E8M0, Device::kCuda,
                    {c.size(0), c.size(1) / kMxfp8ScaleGroup, c.size(2)});
      break;
    case Layout::kGrouped:
      expect_tensor(op.scales, names.scales, DType::kFloat8E8M0, Device::kCuda,
                    {mxfp8_col_blocks(c.size(0), experts), c.size(1)});
      break;
  }
  expect_aligned(op.scales, names.scales);
}

// The BF16 call's operand slot, which the MXFP8 operand replaces, must be empty.
void expect_slot_empty(const TensorView& slot, std::string_view name) {
  MOEFUSE_EXPECT(is_absent(slot), name,
                 "an empty view (the MXFP8 operand takes its place)", "a tensor");
}

// The operands' bf16 copies in the workspace: the first at 0, the second after it.
struct Copies {
  TensorView first, second;
};

TensorView bf16_like(const TensorView& codes, void* data) {
  TensorView v = codes;  // contiguous: the same strides, counted in elements
  v.data = data;
  v.dtype = DType::kBFloat16;
  return v;
}

size_t bf16_bytes(const TensorView& codes) {
  return cuda::align_bytes(static_cast<size_t>(codes.numel()) * 2);
}

Copies copies_in(const Workspace& ws, const Mxfp8Operand& first, const Mxfp8Operand& second) {
  auto* base = static_cast<std::byte*>(ws.data);
  return {bf16_like(first.codes, base), bf16_like(second.codes, base + bf16_bytes(first.codes))};
}

// One operand of a call: where it lies, how it is quantised, what the errors call it.
struct Operand {
  const Mxfp8Operand& op;
  Layout layout;
  OperandNames names;
};

// Both operands' checks (`experts` sizes a grouped operand's scales), their codes and scales
// against the call's outputs, and the workspace (size, alignment) with its copies, which the
// call writes first, against every tensor of the call. Returns the copies.
Copies checked_operands(const Operand& first, const Operand& second, int64_t experts,
                        const Workspace& ws, std::span<const NamedView> outputs,
                        std::span<const NamedView> inputs) {
  expect_operand(first.op, first.layout, first.names, experts);
  expect_operand(second.op, second.layout, second.names, experts);
  const NamedView operands[] = {{first.op.codes, first.names.codes},
                                {first.op.scales, first.names.scales},
                                {second.op.codes, second.names.codes},
                                {second.op.scales, second.names.scales}};
  expect_outputs_disjoint(outputs, operands);
  cuda::expect_workspace(ws, mxfp8_backward_workspace_size(first.op, second.op));
  const Copies c = copies_in(ws, first.op, second.op);
  const NamedView copies[] = {{c.first, "workspace"}, {c.second, "workspace"}};
  for (std::span<const NamedView> others : {std::span<const NamedView>(operands), outputs, inputs})
    expect_outputs_disjoint(copies, others);
  return c;
}

void dequantize(const Mxfp8Operand& op, Layout layout, const TensorView& offsets,
                int64_t experts, const TensorView& out, cudaStream_t stream) {
  switch (layout) {
    case Layout::kRows: {
      const int64_t m_cap = op.codes.size(0);
      gemm::fp8::dequantize_mxfp8_kmajor_bf16(op.codes, op.scales, out, m_cap,
                                              mxfp8_scale_rows(m_cap), stream);
      break;
    }
    case Layout::kWeights:
      cuda::quant::dequantize_mxfp8_cols_bf16(op.codes, TensorView{}, 0, op.scales, out, stream);
      break;
    case Layout::kGrouped:
      cuda::quant::dequantize_mxfp8_cols_bf16(op.codes, offsets, experts, op.scales, out, stream);
      break;
  }
}

constexpr OperandNames kA{"a", "a_scales"}, kB{"b", "b_scales"};
constexpr OperandNames kDys{"dys", "dys_scales"}, kW2{"w2", "w2_scales"};

// Every check of the plain dgrad; returns the BF16 call's arguments on the copies.
GroupedGemmDgradArgs checked_dgrad(const Mxfp8Operand& a, const Mxfp8Operand& b,
                                   const GroupedGemmDgradArgs& args, const Workspace& ws) {
  expect_slot_empty(args.a, "a");
  expect_slot_empty(args.b, "b");
  const NamedView outputs[] = {{args.d, "d"}};
  const NamedView inputs[] = {{args.offsets, "offsets"}};
  const Copies c = checked_operands({a, Layout::kRows, kA}, {b, Layout::kWeights, kB}, 0, ws,
                                    outputs, inputs);
  GroupedGemmDgradArgs bf16 = args;
  bf16.a = c.first;
  bf16.b = c.second;
  validate_grouped_gemm_dgrad(bf16);
  return bf16;
}

Fc2DgradArgs checked_fc2_dgrad(const Mxfp8Operand& dys, const Mxfp8Operand& w2,
                               const Fc2DgradArgs& args, const Fc2DgradScratch& scratch,
                               const Workspace& ws) {
  expect_slot_empty(args.dys, "dys");
  expect_slot_empty(args.w2, "w2");
  // The BF16 call's scratch checks, before the workspace's against the scratch.
  if (!is_absent(args.d_row_scale))
    expect_tensor(scratch.dp_partial, "scratch.dp_partial", DType::kFloat32, Device::kCuda,
                  {dys.codes.size(0), fc2_dgrad_dp_blocks(w2.codes.size(2))});
  gemm::bwd::expect_d_b2_units(args.d_b2, scratch.d_b2_units, dys.codes.size(0),
                               w2.codes.size(0), w2.codes.size(1));
  const NamedView outputs[] = {{args.d_pre, "d_pre"},
                               {args.scaled_act, "scaled_act"},
                               {args.d_row_scale, "d_row_scale"},
                               {args.d_b2, "d_b2"},
                               {scratch.dp_partial, "scratch.dp_partial"},
                               {scratch.bias_partial, "scratch.bias_partial"},
                               {scratch.d_b2_units, "scratch.d_b2_units"}};
  const NamedView inputs[] = {{args.offsets, "offsets"},
                              {args.pre, "pre"},
                              {args.row_scale, "row_scale"},
                              {args.b2, "b2"}};
  const Copies c = checked_operands({dys, Layout::kRows, kDys}, {w2, Layout::kWeights, kW2}, 0,
                                    ws, outputs, inputs);
  Fc2DgradArgs bf16 = args;
  bf16.dys = c.first;
  bf16.w2 = c.second;
  validate_fc2_dgrad(bf16);
  return bf16;
}

GroupedGemmWgradArgs checked_wgrad(const Mxfp8Operand& a, const Mxfp8Operand& b,
                                   const GroupedGemmWgradArgs& args, const Workspace& ws,
                                   int64_t* experts) {
  expect_slot_empty(args.a, "a");
  expect_slot_empty(args.b, "b");
  MOEFUSE_EXPECT(is_absent(args.gather_index), "gather_index",
                 "an empty view (an MXFP8 b holds the permuted rows, quantised per expert)",
                 "a tensor");
  *experts = gemm::expect_expert_offsets(args.offsets, Device::kCuda);
  const NamedView outputs[] = {{args.d, "d"}};
  const NamedView inputs[] = {{args.offsets, "offsets"}};
  const Copies c = checked_operands({a, Layout::kGrouped, kA}, {b, Layout::kGrouped, kB},
                                    *experts, ws, outputs, inputs);
  GroupedGemmWgradArgs bf16 = args;
  bf16.a = c.first;
  bf16.b = c.second;
  validate_grouped_gemm_wgrad(bf16);
  return bf16;
}

}  // namespace

size_t mxfp8_backward_workspace_size(const Mxfp8Operand& first, const Mxfp8Operand& second) {
  return bf16_bytes(first.codes) + bf16_bytes(second.codes);
}

void validate_grouped_gemm_dgrad_mxfp8(const Mxfp8Operand& a, const Mxfp8Operand& b,
                                       const GroupedGemmDgradArgs& args,
                                       const Workspace& workspace) {
  checked_dgrad(a, b, args, workspace);
}

void validate_fc2_dgrad_mxfp8(const Mxfp8Operand& dys, const Mxfp8Operand& w2,
                              const Fc2DgradArgs& args, const Fc2DgradScratch& scratch,
                              const Workspace& workspace) {
  checked_fc2_dgrad(dys, w2, args, scratch, workspace);
}

void validate_grouped_gemm_wgrad_mxfp8(const Mxfp8Operand& a, const Mxfp8Operand& b,
                                       const GroupedGemmWgradArgs& args,
                                       const Workspace& workspace) {
  int64_t experts = 0;
  checked_wgrad(a, b, args, workspace, &experts);
}

void grouped_gemm_dgrad_mxfp8(const Mxfp8Operand& a, const Mxfp8Operand& b,
                              const GroupedGemmDgradArgs& args, const Workspace& workspace,
                              cudaStream_t stream) {
  const GroupedGemmDgradArgs bf16 = checked_dgrad(a, b, args, workspace);
  cuda::expect_launchable(stream);
  dequantize(a, Layout::kRows, args.offsets, 0, bf16.a, stream);
  dequantize(b, Layout::kWeights, args.offsets, 0, bf16.b, stream);
  grouped_gemm_dgrad(bf16, stream);
}

void grouped_gemm_fc2_dgrad_mxfp8(const Mxfp8Operand& dys, const Mxfp8Operand& w2,
                                  const Fc2DgradArgs& args, const Fc2DgradScratch& scratch,
                                  const Workspace& workspace, cudaStream_t stream) {
  const Fc2DgradArgs bf16 = checked_fc2_dgrad(dys, w2, args, scratch, workspace);
  cuda::expect_launchable(stream);
  dequantize(dys, Layout::kRows, args.offsets, 0, bf16.dys, stream);
  dequantize(w2, Layout::kWeights, args.offsets, 0, bf16.w2, stream);
  grouped_gemm_fc2_dgrad(bf16, scratch, stream);
}

void grouped_gemm_wgrad_mxfp8(const Mxfp8Operand& a, const Mxfp8Operand& b,
                              const GroupedGemmWgradArgs& args, const Workspace& workspace,
                              cudaStream_t stream) {
  int64_t experts = 0;
  const GroupedGemmWgradArgs bf16 = checked_wgrad(a, b, args, workspace, &experts);
  cuda::expect_launchable(stream);
  dequantize(a, Layout::kGrouped, args.offsets, experts, bf16.a, stream);
  dequantize(b, Layout::kGrouped, args.offsets, experts, bf16.b, stream);
  grouped_gemm_wgrad(bf16, stream);
}

}  // namespace moefuse
