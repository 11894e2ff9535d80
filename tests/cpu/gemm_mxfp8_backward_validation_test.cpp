// Argument validation of the MXFP8 backward grouped GEMMs (moefuse/grouped_gemm_mxfp8_backward.h)
// and quantize_mxfp8_cols: every bad input throws InvalidArgument naming the argument, before any
// CUDA call (so these run without a GPU); the workspace size arithmetic.
#include <gtest/gtest.h>

#include <cstdint>
#include <functional>

#include "common/test_util.h"
#include "moefuse/grouped_gemm_fp8.h"
#include "moefuse/grouped_gemm_mxfp8_backward.h"
#include "moefuse/quant.h"

namespace moefuse {
namespace {

using test::expect_invalid;

// Views over fake, 256-byte aligned device addresses 2^40 bytes apart (validation rejects
// overlapping views and never dereferences them).
void* fake_ptr() {
  static uintptr_t next = uintptr_t{1} << 40;
  return reinterpret_cast<void*>(next += uintptr_t{1} << 40);
}
TensorView dev(DType dtype, std::initializer_list<int64_t> shape) {
  return TensorView::contiguous(fake_ptr(), dtype, shape, Device::kCuda);
}
Workspace workspace(size_t bytes) { return Workspace{fake_ptr(), bytes}; }

constexpr int64_t kE = 4, kM = 100, kH = 64, kF = 96;
constexpr DType kCodes = DType::kFloat8E4M3, kScales = DType::kFloat8E8M0;

// K along rows: codes [M, K], scales K-major [K/32, mxfp8_scale_rows(M)].
Mxfp8Operand rows(int64_t m, int64_t k) {
  return {dev(kCodes, {m, k}), dev(kScales, {k / 32, mxfp8_scale_rows(m)})};
}
// Weights [E, K, N] quantised along K.
Mxfp8Operand weights(int64_t k, int64_t n) {
  return {dev(kCodes, {kE, k, n}), dev(kScales, {kE, k / 32, n})};
}
// A wgrad operand [M, N] in expert-aligned 32-row blocks.
Mxfp8Operand grouped(int64_t n) {
  return {dev(kCodes, {kM, n}), dev(kScales, {mxfp8_col_blocks(kM, kE), n})};
}

struct Dgrad {  // FC1 dgrad: d_pre [M, 2F] · W1 [E, 2F, H]
  Mxfp8Operand a = rows(kM, 2 * kF), b = weights(2 * kF, kH);
  GroupedGemmDgradArgs args{.offsets = dev(DType::kInt32, {kE + 1}),
                            .d = dev(DType::kBFloat16, {kM, kH})};
  Workspace ws = workspace(mxfp8_backward_workspace_size(a, b));
  void validate() const { validate_grouped_gemm_dgrad_mxfp8(a, b, args, ws); }
};

struct Fc2 {
  Mxfp8Operand dys = rows(kM, kH), w2 = weights(kH, kF);
  Fc2DgradArgs args{.offsets = dev(DType::kInt32, {kE + 1}),
                    .pre = dev(DType::kBFloat16, {kM, 2 * kF}),
                    .d_pre = dev(DType::kBFloat16, {kM, 2 * kF}),
                    .row_scale = dev(DType::kFloat32, {kM}),
                    .scaled_act = dev(DType::kBFloat16, {kM, kF}),
                    .d_row_scale = dev(DType::kFloat32, {kM})};
  Fc2DgradScratch scratch{.dp_partial = dev(DType::kFloat32, {kM, fc2_dgrad_dp_blocks(kF)})};
  Workspace ws = workspace(mxfp8_backward_workspace_size(dys, w2));
  void validate() const { validate_fc2_dgrad_mxfp8(dys, w2, args, scratch, ws); }
};

struct Wgrad {  // dW2 [E, H, F] from dys and scaled_act
  Mxfp8Operand a = grouped(kH), b = grouped(kF);
  GroupedGemmWgradArgs args{.offsets = dev(DType::kInt32, {kE + 1}),
                            .d = dev(DType::kFloat32, {kE, kH, kF}),
                            .accumulate = true};
  Workspace ws = workspace(mxfp8_backward_workspace_size(a, b));
  void validate() const { validate_grouped_gemm_wgrad_mxfp8(a, b, args, ws); }
};

// A call of Case's validation after `edit` to a valid Case.
template <class Case>
auto bad(std::function<void(Case&)> edit) {
  return [edit] {
    Case c;
    edit(c);
    c.validate();
  };
}

TEST(GemmMxfp8BackwardValidation, WorkspaceHoldsBothBf16CopiesAt256ByteOffsets) {
  const Mxfp8Operand a = rows(3, 32), b = weights(64, 16);  // 192 and 8192 bytes of bf16
  EXPECT_EQ(mxfp8_backward_workspace_size(a, b), 256u + 8192u);
  const Mxfp8Operand empty = rows(0, 32);
  EXPECT_EQ(mxfp8_backward_workspace_size(empty, empty), 0u);
}

TEST(GemmMxfp8BackwardValidation, AcceptsValidArguments) {
  EXPECT_NO_THROW(Dgrad{}.validate());
  EXPECT_NO_THROW(Fc2{}.validate());
  EXPECT_NO_THROW(Wgrad{}.validate());
  Fc2 bias;  // d_b2 and dp's b2 term by the dot partials
  bias.args.b2 = dev(DType::kFloat32, {kE, kH});
  bias.args.d_b2 = dev(DType::kFloat32, {kE, kH});
  bias.scratch.bias_partial = dev(DType::kFloat32, {fc2_dgrad_bias_pieces(kH), kM});
  bias.scratch.d_b2_units = dev(DType::kFloat32, {fc2_dgrad_d_b2_units(kM, kE), kH});
  EXPECT_NO_THROW(bias.validate());
  Fc2 bare;  // no dp: no scratch needed
  bare.args.d_row_scale = {};
  bare.scratch = {};
  EXPECT_NO_THROW(bare.validate());
}

TEST(GemmMxfp8BackwardValidation, DgradRejectsBadOperands) {
  // The BF16 call's operand slots must stay empty.
  expect_invalid(bad<Dgrad>([](Dgrad& c) { c.args.a = dev(DType::kBFloat16, {kM, 2 * kF}); }), "a");
  expect_invalid(bad<Dgrad>([](Dgrad& c) { c.args.b = dev(DType::kBFloat16, {kE, 2 * kF, kH}); }),
                 "b");
  expect_invalid(bad<Dgrad>([](Dgrad& c) { c.a.codes = dev(DType::kBFloat16, {kM, 2 * kF}); }),
                 "a");
  expect_invalid(bad<Dgrad>([](Dgrad& c) { c.a = rows(kM, 2 * kF + 16); }), "a");  // K % 32 != 0
  expect_invalid(bad<Dgrad>([](Dgrad& c) { c.a.scales = dev(kScales, {6, kM}); }), "a_scales");
  expect_invalid(bad<Dgrad>([](Dgrad& c) { c.a.scales = dev(DType::kUInt8, {6, 112}); }),
                 "a_scales");
  expect_invalid(bad<Dgrad>([](Dgrad& c) { c.b.scales = dev(kScales, {kE, 2 * kF, kH}); }),
                 "b_scales");
  expect_invalid(bad<Dgrad>([](Dgrad& c) { c.b.codes = dev(kCodes, {kE, 2 * kF}); }), "b");
  // K of a against K of b: the BF16 call's check on the copies names its "a".
  expect_invalid(bad<Dgrad>([](Dgrad& c) { c.a = rows(kM, 2 * kF - 32); }), "a");
  expect_invalid(bad<Dgrad>([](Dgrad& c) { c.args.d = dev(DType::kBFloat16, {kM, kH + 8}); }), "d");
  // d over the codes of a.
  expect_invalid(bad<Dgrad>([](Dgrad& c) {
                   c.args.d = TensorView::contiguous(c.a.codes.data, DType::kBFloat16, {kM, kH},
                                                     Device::kCuda);
                 }), "d");
}

TEST(GemmMxfp8BackwardValidation, RejectsABadWorkspace) {
  expect_invalid(bad<Dgrad>([](Dgrad& c) { c.ws.bytes -= 1; }), "workspace");
  expect_invalid(bad<Dgrad>([](Dgrad& c) { c.ws.data = static_cast<char*>(c.ws.data) + 16; }),
                 "workspace");
  expect_invalid(bad<Dgrad>([](Dgrad& c) { c.ws.data = nullptr; }), "workspace");
  // The copies over d, over the offsets, over a's scales.
  expect_invalid(bad<Dgrad>([](Dgrad& c) { c.ws.data = c.args.d.data; }), "workspace");
  expect_invalid(bad<Dgrad>([](Dgrad& c) { c.ws.data = c.args.offsets.data; }), "workspace");
  expect_invalid(bad<Dgrad>([](Dgrad& c) { c.ws.data = c.a.scales.data; }), "workspace");
}

TEST(GemmMxfp8BackwardValidation, Fc2DgradRejectsBadOperands) {
  expect_invalid(bad<Fc2>([](Fc2& c) { c.args.dys = dev(DType::kBFloat16, {kM, kH}); }), "dys");
  expect_invalid(bad<Fc2>([](Fc2& c) { c.args.w2 = dev(DType::kBFloat16, {kE, kH, kF}); }), "w2");
  expect_invalid(bad<Fc2>([](Fc2& c) { c.dys.scales = dev(kScales, {kH / 32, kM}); }),
                 "dys_scales");
  expect_invalid(bad<Fc2>([](Fc2& c) { c.w2.scales = dev(kScales, {kE, kF / 32, kH}); }),
                 "w2_scales");
  expect_invalid(bad<Fc2>([](Fc2& c) {  // F against pre's 2F
                   c.w2 = weights(kH, kF + 8);
                   c.ws = workspace(mxfp8_backward_workspace_size(c.dys, c.w2));
                 }), "pre");
  expect_invalid(bad<Fc2>([](Fc2& c) { c.scratch.dp_partial = dev(DType::kFloat32, {kM, 7}); }),
                 "scratch.dp_partial");
  expect_invalid(bad<Fc2>([](Fc2& c) { c.ws.data = c.scratch.dp_partial.data; }), "workspace");
  // d_b2 and the b2 dots' scratch are written too: not over the workspace's bf16 copies.
  expect_invalid(bad<Fc2>([](Fc2& c) {
                   c.args.d_b2 = dev(DType::kFloat32, {kE, kH});
                   c.scratch.d_b2_units = dev(DType::kFloat32, {fc2_dgrad_d_b2_units(kM, kE), kH});
                   c.ws.data = c.args.d_b2.data;
                 }), "workspace");
  expect_invalid(bad<Fc2>([](Fc2& c) {
                   c.args.d_b2 = dev(DType::kFloat32, {kE, kH});
                   c.scratch.d_b2_units = dev(DType::kFloat32, {fc2_dgrad_d_b2_units(kM, kE), kH});
                   c.ws.data = c.scratch.d_b2_units.data;
                 }), "workspace");
  expect_invalid(bad<Fc2>([](Fc2& c) { c.args.d_b2 = dev(DType::kFloat32, {kE, kH}); }),
                 "scratch.d_b2_units");
  expect_invalid(bad<Fc2>([](Fc2& c) {
                   c.scratch.d_b2_units = dev(DType::kFloat32, {fc2_dgrad_d_b2_units(kM, kE), kH});
                 }), "scratch.d_b2_units");
  expect_invalid(bad<Fc2>([](Fc2& c) {
                   c.args.b2 = dev(DType::kFloat32, {kE, kH});
                   c.scratch.bias_partial =
                       dev(DType::kFloat32, {fc2_dgrad_bias_pieces(kH), kM});
                   c.ws.data = c.scratch.bias_partial.data;
                 }), "workspace");
  expect_invalid(bad<Fc2>([](Fc2& c) {
                   c.args.d_pre = TensorView::contiguous(c.w2.codes.data, DType::kBFloat16,
                                                         {kM, 2 * kF}, Device::kCuda);
                 }), "d_pre");
}

TEST(GemmMxfp8BackwardValidation, WgradRejectsBadOperands) {
  expect_invalid(bad<Wgrad>([](Wgrad& c) { c.args.gather_index = dev(DType::kInt32, {kM}); }),
                 "gather_index");
  expect_invalid(bad<Wgrad>([](Wgrad& c) { c.args.a = dev(DType::kBFloat16, {kM, kH}); }), "a");
  // Scales for blocks from row 0 (ceil(M / 32)), not restarting at each expert.
  expect_invalid(bad<Wgrad>([](Wgrad& c) { c.a.scales = dev(kScales, {(kM + 31) / 32, kH}); }),
                 "a_scales");
  expect_invalid(
      bad<Wgrad>([](Wgrad& c) { c.b.scales = dev(kScales, {mxfp8_col_blocks(kM, kE), 8}); }),
      "b_scales");
  expect_invalid(bad<Wgrad>([](Wgrad& c) { c.args.offsets = dev(DType::kInt32, {1}); }), "offsets");
  expect_invalid(bad<Wgrad>([](Wgrad& c) { c.args.d = dev(DType::kInt32, {kE, kH, kF}); }), "d");
}

TEST(GemmMxfp8BackwardValidation, QuantizeColsRejectsBadArguments) {
  const TensorView x = dev(DType::kBFloat16, {kM, kH}), offsets = dev(DType::kInt32, {kE + 1});
  const TensorView q = dev(kCodes, {kM, kH}), scales = dev(kScales, {mxfp8_col_blocks(kM, kE), kH});
  auto call = [](TensorView xv, TensorView ov, TensorView qv, TensorView sv) {
    return [=] { quantize_mxfp8_cols(xv, ov, qv, sv, nullptr); };
  };
  expect_invalid(call(dev(DType::kFloat32, {kM, kH}), offsets, q, scales), "x");
  expect_invalid(call(x, offsets, q, dev(kScales, {(kM + 31) / 32, kH})), "scales");
  expect_invalid(call(x, TensorView{}, q, scales), "x");  // 100 rows: not whole blocks
  TensorView misaligned = q;
  misaligned.data = static_cast<char*>(q.data) + 4;
  expect_invalid(call(x, offsets, misaligned, scales), "q");
  expect_invalid(call(x, offsets, q, TensorView::contiguous(x.data, kScales,
                                                            {mxfp8_col_blocks(kM, kE), kH},
                                                            Device::kCuda)),
                 "scales");
}

}  // namespace
}  // namespace moefuse
