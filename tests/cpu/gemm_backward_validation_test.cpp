// Argument validation of the backward grouped GEMMs: every bad input throws InvalidArgument
// naming the argument, before any CUDA call (so these run without a GPU).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "common/test_util.h"
#include "cuda/gemm/backward/config.h"
#include "cuda/gemm/backward/segment_sums.h"
#include "moefuse/error.h"
#include "moefuse/grouped_gemm_backward.h"

namespace moefuse {
namespace {

// Views over fake, 256-byte aligned device addresses, a fresh one per call 2^40 bytes apart
// (validation rejects overlapping views); validation never dereferences them.
void* fake_ptr() {
  static uintptr_t next = uintptr_t{1} << 40;
  return reinterpret_cast<void*>(next += uintptr_t{1} << 40);
}

// A view at byte `offset` of `base`'s data, for outputs that alias an input.
TensorView at(const TensorView& base, int64_t offset, DType dtype,
              std::initializer_list<int64_t> shape) {
  return TensorView::contiguous(static_cast<char*>(base.data) + offset, dtype, shape,
                                Device::kCuda);
}

TensorView dev(DType dtype, std::initializer_list<int64_t> shape) {
  return TensorView::contiguous(fake_ptr(), dtype, shape, Device::kCuda);
}

constexpr int64_t kE = 4, kM = 100, kH = 48, kF = 64;

template <class Args>
void expect_rejects(void (*validate)(const Args&), const Args& args, const std::string& argument) {
  test::expect_invalid([&] { validate(args); }, argument);
}

GroupedGemmDgradArgs valid_dgrad() {  // FC1 dgrad: d_pre [M, 2F] · W1 [E, 2F, H]
  return GroupedGemmDgradArgs{.a = dev(DType::kBFloat16, {kM, 2 * kF}),
                              .b = dev(DType::kBFloat16, {kE, 2 * kF, kH}),
                              .offsets = dev(DType::kInt32, {kE + 1}),
                              .d = dev(DType::kBFloat16, {kM, kH})};
}

Fc2DgradArgs valid_fc2() {
  return Fc2DgradArgs{.dys = dev(DType::kBFloat16, {kM, kH}),
                      .w2 = dev(DType::kBFloat16, {kE, kH, kF}),
                      .offsets = dev(DType::kInt32, {kE + 1}),
                      .pre = dev(DType::kBFloat16, {kM, 2 * kF}),
                      .d_pre = dev(DType::kBFloat16, {kM, 2 * kF}),
                      .activation = Activation::kClampedSwiGLU,
                      .row_scale = dev(DType::kFloat32, {kM}),
                      .scaled_act = dev(DType::kBFloat16, {kM, kF}),
                      .d_row_scale = dev(DType::kFloat32, {kM}),
                      .b2 = dev(DType::kFloat32, {kE, kH})};
}

GroupedGemmWgradArgs valid_wgrad() {  // dW1 [E, 2F, H] from d_pre and xs
  return GroupedGemmWgradArgs{.a = dev(DType::kBFloat16, {kM, 2 * kF}),
                              .b = dev(DType::kBFloat16, {kM, kH}),
                              .offsets = dev(DType::kInt32, {kE + 1}),
                              .d = dev(DType::kFloat32, {kE, 2 * kF, kH}),
                              .accumulate = true};
}

TEST(GemmBackwardValidation, AcceptsValidArguments) {
  EXPECT_NO_THROW(validate_grouped_gemm_dgrad(valid_dgrad()));
  GroupedGemmDgradArgs fp32 = valid_dgrad();
  fp32.d = dev(DType::kFloat32, {kM, kH});
  EXPECT_NO_THROW(validate_grouped_gemm_dgrad(fp32));
  EXPECT_NO_THROW(validate_fc2_dgrad(valid_fc2()));
  Fc2DgradArgs minimal = valid_fc2();  // squared ReLU: pre [M, F]; no optional outputs
  minimal.activation = Activation::kSquaredReLU;
  minimal.pre = dev(DType::kBFloat16, {kM, kF});
  minimal.d_pre = dev(DType::kBFloat16, {kM, kF});
  minimal.row_scale = minimal.scaled_act = minimal.d_row_scale = minimal.b2 = {};
  EXPECT_NO_THROW(validate_fc2_dgrad(minimal));
  EXPECT_NO_THROW(validate_grouped_gemm_wgrad(valid_wgrad()));
  GroupedGemmWgradArgs gather = valid_wgrad();
  gather.b = dev(DType::kBFloat16, {37, kH});  // x [T, H], T unrelated to M_cap
  gather.gather_index = dev(DType::kInt32, {kM});
  EXPECT_NO_THROW(validate_grouped_gemm_wgrad(gather));
  GroupedGemmWgradArgs empty = valid_wgrad();  // M_cap = 0 is valid
  empty.a = dev(DType::kBFloat16, {0, 2 * kF});
  empty.b = dev(DType::kBFloat16, {0, kH});
  EXPECT_NO_THROW(validate_grouped_gemm_wgrad(empty));
}

TEST(GemmBackwardValidation, DgradRejectsBadArguments) {
  const auto v = &validate_grouped_gemm_dgrad;
  auto with = [](std::function<void(GroupedGemmDgradArgs&)> edit) {
    GroupedGemmDgradArgs a = valid_dgrad();
    edit(a);
    return a;
  };
  expect_rejects(v, with([](auto& a) { a.b = dev(DType::kBFloat16, {kE, 2 * kF}); }), "b");
  expect_rejects(v, with([](auto& a) { a.b = dev(DType::kFloat32, {kE, 2 * kF, kH}); }), "b");
  expect_rejects(v, with([](auto& a) { a.b = dev(DType::kBFloat16, {kE, 2 * kF, 44}); }), "b");
  expect_rejects(v, with([](auto& a) { a.b = dev(DType::kBFloat16, {0, 2 * kF, kH}); }), "b");
  expect_rejects(v, with([](auto& a) { a.offsets = dev(DType::kInt32, {kE}); }), "offsets");
  expect_rejects(v, with([](auto& a) { a.max_ctas = -1; }), "max_ctas");
  expect_rejects(v, with([](auto& a) { a.a = dev(DType::kBFloat16, {kM, kF}); }), "a");
  expect_rejects(v, with([](auto& a) { a.d = dev(DType::kBFloat16, {kM + 1, kH}); }), "d");
  expect_rejects(v, with([](auto& a) { a.d = dev(DType::kInt32, {kM, kH}); }), "d");
  expect_rejects(v, with([](auto& a) {
                   a.d.data = static_cast<char*>(a.d.data) + 2;
                 }), "d");
  expect_rejects(v, with([](auto& a) { a.a.device = Device::kCpu; }), "a");
  // d overlapping an operand: the last row of a, the weights, the offsets.
  expect_rejects(v, with([](auto& a) {
                   a.d = at(a.a, (kM - 1) * 2 * kF * 2, DType::kBFloat16, {kM, kH});
                 }), "d");
  expect_rejects(v, with([](auto& a) { a.d = at(a.b, 256, DType::kBFloat16, {kM, kH}); }), "d");
  expect_rejects(v, with([](auto& a) { a.d = at(a.offsets, 0, DType::kBFloat16, {kM, kH}); }), "d");
}

// The side permute: T = 30 tokens, k = 3, R = kM rows of H = kH.
GroupedGemmDgradArgs with_permute() {
  GroupedGemmDgradArgs a = valid_dgrad();
  a.permute = {.x = dev(DType::kBFloat16, {30, kH}),
               .row_of = dev(DType::kInt32, {30, 3}),
               .token_of_row = dev(DType::kInt32, {kM}),
               .xs = dev(DType::kBFloat16, {kM, kH}),
               .health = dev(DType::kInt32, {1})};
  return a;
}

TEST(GemmBackwardValidation, DgradPermuteIsWholeAndApart) {
  const auto v = &validate_grouped_gemm_dgrad;
  EXPECT_NO_THROW(v(with_permute()));
  auto with = [](std::function<void(GroupedGemmDgradArgs&)> edit) {
    GroupedGemmDgradArgs a = with_permute();
    edit(a);
    return a;
  };
  EXPECT_NO_THROW(v(with([](auto& a) { a.permute.health = {}; })));
  expect_rejects(v, with([](auto& a) { a.permute.x = {}; }), "permute.x");
  expect_rejects(v, with([](auto& a) { a.permute.xs = {}; }), "permute.xs");
  expect_rejects(v, with([](auto& a) { a.permute.xs = dev(DType::kBFloat16, {kM, 2 * kH}); }),
                 "permute.xs");
  expect_rejects(v, with([](auto& a) { a.permute.row_of = dev(DType::kInt32, {31, 3}); }),
                 "permute.row_of");
  expect_rejects(v, with([](auto& a) { a.permute.health = dev(DType::kFloat32, {1}); }),
                 "permute.health");
  expect_rejects(v, with([](auto& a) { a.d = dev(DType::kFloat32, {kM, kH}); }), "permute");
  // xs over the GEMM's operands or output, or over x.
  expect_rejects(v, with([](auto& a) { a.permute.xs = at(a.d, 0, DType::kBFloat16, {kM, kH}); }),
                 "d");
  expect_rejects(v, with([](auto& a) { a.permute.xs = at(a.a, 0, DType::kBFloat16, {kM, kH}); }),
                 "permute.xs");
  expect_rejects(v, with([](auto& a) {
                   a.permute.xs = at(a.permute.x, 0, DType::kBFloat16, {kM, kH});
                 }), "permute.xs");
}

TEST(GemmBackwardValidation, Fc2DgradRejectsBadArguments) {
  const auto v = &validate_fc2_dgrad;
  auto with = [](std::function<void(Fc2DgradArgs&)> edit) {
    Fc2DgradArgs a = valid_fc2();
    edit(a);
    return a;
  };
  expect_rejects(v, with([](auto& a) { a.activation = static_cast<Activation>(99); }), "activation");
  expect_rejects(v, with([](auto& a) { a.w2 = dev(DType::kBFloat16, {kE, kH, 20}); }), "w2");
  expect_rejects(v, with([](auto& a) { a.max_ctas = -3; }), "max_ctas");
  GroupedGemmWgradArgs wgrad = valid_wgrad();
  wgrad.max_ctas = -1;
  expect_rejects(&validate_grouped_gemm_wgrad, wgrad, "max_ctas");
  expect_rejects(v, with([](auto& a) { a.dys = dev(DType::kBFloat16, {kM, kF}); }), "dys");
  expect_rejects(v, with([](auto& a) { a.pre = dev(DType::kBFloat16, {kM, kF}); }), "pre");
  expect_rejects(v, with([](auto& a) { a.d_pre = dev(DType::kFloat32, {kM, 2 * kF}); }), "d_pre");
  expect_rejects(v, with([](auto& a) { a.row_scale = dev(DType::kFloat32, {kM - 1}); }), "row_scale");
  expect_rejects(v, with([](auto& a) { a.scaled_act = dev(DType::kBFloat16, {kM, 2 * kF}); }), "scaled_act");
  expect_rejects(v, with([](auto& a) { a.d_row_scale = dev(DType::kBFloat16, {kM}); }), "d_row_scale");
  expect_rejects(v, with([](auto& a) { a.b2 = dev(DType::kFloat32, {kE, kF}); }), "b2");
  expect_rejects(v, with([](auto& a) { a.d_row_scale = {}; }), "b2");
  // dp_reduce reads b2 in 16-byte vectors.
  expect_rejects(v, with([](auto& a) { a.b2 = at(a.b2, 4, DType::kFloat32, {kE, kH}); }), "b2");
  expect_rejects(v, with([](auto& a) { a.d_b2 = dev(DType::kFloat32, {kE, kF}); }), "d_b2");
  expect_rejects(v, with([](auto& a) { a.d_b2 = dev(DType::kBFloat16, {kE, kH}); }), "d_b2");
  expect_rejects(v, with([](auto& a) {
                   a.d_b2 = dev(DType::kFloat32, {kE, kH});
                   a.d_b2 = at(a.d_b2, 4, DType::kFloat32, {kE, kH});
                 }), "d_b2");
  expect_rejects(v, with([](auto& a) { a.d_b2 = a.b2; }), "d_b2");
  expect_rejects(v, with([](auto& a) { a.accumulate_d_b2 = true; }), "accumulate_d_b2");
  expect_rejects(v, with([](auto& a) { a.offsets = dev(DType::kInt64, {kE + 1}); }), "offsets");
  // Outputs overlapping an input or each other (d_pre in place of pre is not supported: the
  // epilogue of one tile reads pre while another's writes d_pre).
  expect_rejects(v, with([](auto& a) { a.d_pre = a.pre; }), "d_pre");
  expect_rejects(v, with([](auto& a) {
                   a.d_pre = at(a.dys, 16, DType::kBFloat16, {kM, 2 * kF});
                 }), "d_pre");
  expect_rejects(v, with([](auto& a) {
                   a.scaled_act = at(a.d_pre, kM * 2 * kF * 2 - 16, DType::kBFloat16, {kM, kF});
                 }), "d_pre");
  expect_rejects(v, with([](auto& a) { a.scaled_act = at(a.w2, 0, DType::kBFloat16, {kM, kF}); }),
                 "scaled_act");
  expect_rejects(v, with([](auto& a) { a.d_row_scale = a.row_scale; }), "d_row_scale");
  expect_rejects(v, with([](auto& a) { a.d_row_scale = at(a.b2, 4, DType::kFloat32, {kM}); }),
                 "d_row_scale");
}

TEST(GemmBackwardValidation, WgradRejectsBadArguments) {
  const auto v = &validate_grouped_gemm_wgrad;
  auto with = [](std::function<void(GroupedGemmWgradArgs&)> edit) {
    GroupedGemmWgradArgs a = valid_wgrad();
    edit(a);
    return a;
  };
  expect_rejects(v, with([](auto& a) { a.d = dev(DType::kFloat32, {kE, 2 * kF}); }), "d");
  expect_rejects(v, with([](auto& a) { a.d = dev(DType::kFloat32, {kE, 2 * kF, 50}); }), "d");
  expect_rejects(v, with([](auto& a) { a.d = dev(DType::kFloat32, {1025, 2 * kF, kH}); }), "d");
  expect_rejects(v, with([](auto& a) { a.d = dev(DType::kBFloat16, {kE, 2 * kF, kH}); }), "accumulate");
  expect_rejects(v, with([](auto& a) { a.a = dev(DType::kBFloat16, {kM, kH}); }), "a");
  expect_rejects(v, with([](auto& a) { a.b = dev(DType::kBFloat16, {kM + 3, kH}); }), "b");
  expect_rejects(v, with([](auto& a) { a.offsets = dev(DType::kInt32, {kE + 2}); }), "offsets");
  expect_rejects(v, with([](auto& a) { a.gather_index = dev(DType::kInt32, {kM + 1}); }), "gather_index");
  // d (read and written in place with accumulate: that is no overlap) against the operands.
  expect_rejects(v, with([](auto& a) {
                   a.d = at(a.b, 64, DType::kFloat32, {kE, 2 * kF, kH});
                 }), "d");
  expect_rejects(v, with([](auto& a) {
                   a.d = at(a.a, 0, DType::kFloat32, {kE, 2 * kF, kH});
                 }), "d");
  expect_rejects(v, with([](auto& a) {
                   a.gather_index = dev(DType::kInt32, {kM});
                   a.b = dev(DType::kBFloat16, {37, kH});
                   a.d = at(a.gather_index, 0, DType::kFloat32, {kE, 2 * kF, kH});
                 }), "d");
}

// The layer hands one call several views of one workspace region: adjacent byte ranges are fine,
// one byte of overlap is not.
TEST(GemmBackwardValidation, AdjacentViewsOfOneRegionAreAccepted) {
  const TensorView region = dev(DType::kFloat8E4M3, {1 << 20});  // bytes
  const int64_t a_bytes = kM * 2 * kF * 2, b_bytes = kM * kH * 2;
  GroupedGemmWgradArgs w = valid_wgrad();
  w.a = at(region, 0, DType::kBFloat16, {kM, 2 * kF});
  w.b = at(region, a_bytes, DType::kBFloat16, {kM, kH});
  w.d = at(region, a_bytes + b_bytes, DType::kFloat32, {kE, 2 * kF, kH});
  EXPECT_NO_THROW(validate_grouped_gemm_wgrad(w));
  w.d = at(region, a_bytes + b_bytes - 16, DType::kFloat32, {kE, 2 * kF, kH});
  expect_rejects(&validate_grouped_gemm_wgrad, w, "d");

  Fc2DgradArgs f = valid_fc2();
  f.pre = at(region, 0, DType::kBFloat16, {kM, 2 * kF});
  f.d_pre = at(region, a_bytes, DType::kBFloat16, {kM, 2 * kF});
  f.scaled_act = at(region, 2 * a_bytes, DType::kBFloat16, {kM, kF});
  EXPECT_NO_THROW(validate_fc2_dgrad(f));
}

// The entry points check the scratch they write against the arguments too.
TEST(GemmBackwardValidation, ScratchMustNotOverlapTheArguments) {
  const Fc2DgradArgs f = valid_fc2();
  test::expect_invalid([&] {
    const TensorView partial = at(f.d_pre, 0, DType::kFloat32, {kM, fc2_dgrad_dp_blocks(kF)});
    grouped_gemm_fc2_dgrad(f, {.dp_partial = partial, .g = {}}, nullptr);
  }, "scratch.dp_partial");
  test::expect_invalid([&] {
    const TensorView g = at(f.dys, 0, DType::kBFloat16, {kM, kF});
    grouped_gemm_fc2_dgrad_unfused(f, {.dp_partial = {}, .g = g}, nullptr);
  }, "scratch.g");
  // scratch.bias_partial: [pieces, M] fp32, with b2 only, apart from everything else, and none for
  // the unfused twin.
  const TensorView partial = dev(DType::kFloat32, {kM, fc2_dgrad_dp_blocks(kF)});
  const int64_t pieces = fc2_dgrad_bias_pieces(kH);
  for (const TensorView& bad : {dev(DType::kFloat32, {pieces, kM + 1}),
                                dev(DType::kBFloat16, {pieces, kM}),
                                at(f.d_pre, 0, DType::kFloat32, {pieces, kM})}) {
    test::expect_invalid([&] {
      grouped_gemm_fc2_dgrad(f, {.dp_partial = partial, .bias_partial = bad, .g = {}}, nullptr);
    }, "scratch.bias_partial");
  }
  test::expect_invalid([&] {  // the first of the two scratch views is named
    grouped_gemm_fc2_dgrad(
        f, {.dp_partial = partial, .bias_partial = at(partial, 0, DType::kFloat32, {pieces, kM}),
            .g = {}},
        nullptr);
  }, "scratch.dp_partial");
  test::expect_invalid([&] {
    Fc2DgradArgs no_bias = f;
    no_bias.b2 = {};
    grouped_gemm_fc2_dgrad(no_bias,
                           {.dp_partial = partial,
                            .bias_partial = dev(DType::kFloat32, {pieces, kM}),
                            .g = {}},
                           nullptr);
  }, "scratch.bias_partial");
  test::expect_invalid([&] {
    grouped_gemm_fc2_dgrad_unfused(f,
                                   {.dp_partial = {},
                                    .bias_partial = dev(DType::kFloat32, {pieces, kM}),
                                    .g = dev(DType::kBFloat16, {kM, kF})},
                                   nullptr);
  }, "scratch.bias_partial");
  GroupedGemmWgradArgs w = valid_wgrad();
  w.b = dev(DType::kBFloat16, {37, kH});
  w.gather_index = dev(DType::kInt32, {kM});
  test::expect_invalid([&] {
    grouped_gemm_wgrad_unfused(w, {.gathered_b = at(w.b, 0, DType::kBFloat16, {kM, kH})}, nullptr);
  }, "scratch.gathered_b");
}

// scratch.d_b2_units: [units, H] fp32 exactly when d_b2 is asked for, fused or unfused, apart
// from everything else.
TEST(GemmBackwardValidation, D_b2UnitsGoWithD_b2) {
  Fc2DgradArgs f = valid_fc2();
  f.d_b2 = dev(DType::kFloat32, {kE, kH});
  const TensorView partial = dev(DType::kFloat32, {kM, fc2_dgrad_dp_blocks(kF)});
  const TensorView g = dev(DType::kBFloat16, {kM, kF});
  const int64_t units = fc2_dgrad_d_b2_units(kM, kE);
  auto fused = [&](const Fc2DgradArgs& a, const TensorView& u) {
    grouped_gemm_fc2_dgrad(a, {.dp_partial = partial, .g = {}, .d_b2_units = u}, nullptr);
  };
  auto unfused = [&](const Fc2DgradArgs& a, const TensorView& u) {
    grouped_gemm_fc2_dgrad_unfused(a, {.dp_partial = {}, .g = g, .d_b2_units = u}, nullptr);
  };
  for (const auto& run : {std::function(fused), std::function(unfused)}) {
    for (const TensorView& bad : {TensorView{}, dev(DType::kFloat32, {units - 1, kH}),
                                  dev(DType::kBFloat16, {units, kH}),
                                  at(f.d_pre, 0, DType::kFloat32, {units, kH})})
      test::expect_invalid([&] { run(f, bad); }, "scratch.d_b2_units");
    Fc2DgradArgs no_d_b2 = f;
    no_d_b2.d_b2 = {};
    test::expect_invalid([&] { run(no_d_b2, dev(DType::kFloat32, {units, kH})); },
                         "scratch.d_b2_units");
  }
}

// Every split of M rows among E experts fits the units' bound (each expert's last unit may be a
// partial one), empty experts and all rows on one expert included.
TEST(GemmBackwardValidation, D_b2UnitsBoundEverySplit) {
  constexpr int64_t kRows = gemm::bwd::kSegmentRows;
  EXPECT_EQ(fc2_dgrad_d_b2_units(0, 4), 4);
  EXPECT_EQ(fc2_dgrad_d_b2_units(kRows, 1), 2);
  EXPECT_EQ(fc2_dgrad_d_b2_units(65536, 128), 65536 / kRows + 128);  // gpt-oss-120b's R, E
  std::mt19937 gen(7);
  for (int trial = 0; trial < 200; ++trial) {
    const int64_t m = std::uniform_int_distribution<int64_t>(0, 5000)(gen);
    const int e = std::uniform_int_distribution<int>(1, 40)(gen);
    std::vector<int64_t> cut(e - 1);
    for (int64_t& c : cut)  // every fourth trial: all rows on the first expert
      c = trial % 4 == 0 ? m : std::uniform_int_distribution<int64_t>(0, m)(gen);
    cut.push_back(0), cut.push_back(m);
    std::sort(cut.begin(), cut.end());
    int64_t units = 0;
    for (int i = 0; i < e; ++i) units += gemm::bwd::segment_units(cut[i + 1] - cut[i]);
    EXPECT_LE(units, fc2_dgrad_d_b2_units(m, e)) << "M " << m << ", E " << e;
  }
}

TEST(GemmBackwardValidation, BiasPiecesCoverTheHidden) {
  EXPECT_EQ(fc2_dgrad_bias_pieces(8), 1);
  EXPECT_EQ(fc2_dgrad_bias_pieces(256), 1);
  EXPECT_EQ(fc2_dgrad_bias_pieces(264), 2);
  EXPECT_EQ(fc2_dgrad_bias_pieces(2880), 12);
}

TEST(GemmBackwardValidation, DpBlocksCoverTheFfn) {
  EXPECT_EQ(fc2_dgrad_dp_blocks(8), 1);
  EXPECT_EQ(fc2_dgrad_dp_blocks(192), 1);
  EXPECT_EQ(fc2_dgrad_dp_blocks(256), 2);
  EXPECT_EQ(fc2_dgrad_dp_blocks(768), 4);
  EXPECT_EQ(fc2_dgrad_dp_blocks(2880), 15);
  EXPECT_EQ(fc2_dgrad_dp_blocks(14336), 75);
}

// The FC2 dGLU dgrad's tile width by K = H: the narrow shape up to 3072 (qwen3 2048, gpt-oss
// 2880), the wide one past it (mixtral 4096, deepseek 7168); dp_blocks covers either.
TEST(GemmBackwardValidation, DgluShapeByHidden) {
  using gemm::bwd::dglu_block_n;
  for (int64_t h : {8, 2048, 2880, 3072}) EXPECT_EQ(dglu_block_n(h), 192) << "H " << h;
  for (int64_t h : {3080, 4096, 7168}) EXPECT_EQ(dglu_block_n(h), 256) << "H " << h;
  for (int64_t f : {8, 192, 200, 328, 2048, 2880, 14336})
    EXPECT_GE(fc2_dgrad_dp_blocks(f), (f + 255) / 256) << "F " << f;
}

// The TMA wgrad's narrow 128 × 192 tiles exactly for fp32 D where 192 divides N_out: gpt-oss's
// 2880 (both wgrads) and qwen3's dW2 (768), not qwen3's 2048, mixtral's, deepseek's nor the
// tails of 328 or 520.
TEST(GemmBackwardValidation, WgradNarrowTilesByWidth) {
  using gemm::bwd::wgrad_narrow;
  for (int64_t n : {192, 576, 768, 2880}) {
    EXPECT_TRUE(wgrad_narrow(n, true)) << "N " << n;
    EXPECT_FALSE(wgrad_narrow(n, false)) << "bf16 D, N " << n;
  }
  for (int64_t n : {256, 2048, 4096, 7168, 14336, 328, 520})
    EXPECT_FALSE(wgrad_narrow(n, true)) << "N " << n;
}

// The plain dgrad's narrow tiles likewise, for bf16 D (the layer's FC1 dgrad).
TEST(GemmBackwardValidation, DgradNarrowTilesByWidth) {
  using gemm::bwd::dgrad_narrow;
  for (int64_t n : {192, 576, 2880}) {
    EXPECT_TRUE(dgrad_narrow(n, false)) << "N " << n;
    EXPECT_FALSE(dgrad_narrow(n, true)) << "fp32 D, N " << n;
  }
  for (int64_t n : {256, 768, 2048, 4096, 7168, 328, 520})
    EXPECT_FALSE(dgrad_narrow(n, false)) << "N " << n;
}

}  // namespace
}  // namespace moefuse
