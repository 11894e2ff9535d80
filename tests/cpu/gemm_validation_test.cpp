// Argument validation of the grouped GEMM, and of the workspace the FP8 grouped GEMM's MXFP8 recipe
// adds: every bad input throws InvalidArgument naming the argument, before any CUDA call (so these
// run without a GPU).
#include <gtest/gtest.h>

#include <cstdint>
#include <functional>
#include <string>

#include "common/test_util.h"
#include "moefuse/error.h"
#include "moefuse/grouped_gemm.h"
#include "moefuse/grouped_gemm_fp8.h"

namespace moefuse {
namespace {

// Views over fake, 256-byte aligned device addresses, a fresh one per call 2^40 bytes apart
// (validation rejects overlapping views); validation never dereferences them.
void* fake_ptr() {
  static uintptr_t next = uintptr_t{1} << 40;
  return reinterpret_cast<void*>(next += uintptr_t{1} << 40);
}

TensorView dev(DType dtype, std::initializer_list<int64_t> shape) {
  return TensorView::contiguous(fake_ptr(), dtype, shape, Device::kCuda);
}

constexpr int64_t kE = 4, kM = 100, kN = 64, kK = 48;

GroupedGemmArgs valid_fc1() {
  return GroupedGemmArgs{.a = dev(DType::kBFloat16, {kM, kK}),
                         .b = dev(DType::kBFloat16, {kE, kN, kK}),
                         .offsets = dev(DType::kInt32, {kE + 1}),
                         .d = dev(DType::kBFloat16, {kM, kN / 2}),
                         .epilogue = GemmEpilogue::kActivation,
                         .activation = Activation::kSwiGLU,
                         .bias = dev(DType::kFloat32, {kE, kN}),
                         .row_scale = dev(DType::kFloat32, {kM}),
                         .pre_activation = dev(DType::kBFloat16, {kM, kN})};
}

void expect_rejects(const GroupedGemmArgs& args, const std::string& argument) {
  test::expect_invalid([&] { validate_grouped_gemm(args); }, argument);
}

TEST(GemmValidation, AcceptsValidFc1AndFc2) {
  EXPECT_NO_THROW(validate_grouped_gemm(valid_fc1()));
  GroupedGemmArgs fc2 = valid_fc1();
  fc2.epilogue = GemmEpilogue::kLinear;
  fc2.pre_activation = {};
  fc2.d = dev(DType::kFloat32, {kM, kN});
  EXPECT_NO_THROW(validate_grouped_gemm(fc2));
  GroupedGemmArgs gather = valid_fc1();
  gather.a = dev(DType::kBFloat16, {37, kK});  // x [T, K], T unrelated to M_cap
  gather.gather_index = dev(DType::kInt32, {kM});
  EXPECT_NO_THROW(validate_grouped_gemm(gather));
  GroupedGemmArgs empty = valid_fc1();  // M_cap = 0 is valid
  empty.a = dev(DType::kBFloat16, {0, kK});
  empty.d = dev(DType::kBFloat16, {0, kN / 2});
  empty.row_scale = dev(DType::kFloat32, {0});
  empty.pre_activation = dev(DType::kBFloat16, {0, kN});
  EXPECT_NO_THROW(validate_grouped_gemm(empty));
}

TEST(GemmValidation, RejectsEachBadArgumentByName) {
  struct Case {
    std::string argument;
    std::function<void(GroupedGemmArgs&)> spoil;
  };
  const Case cases[] = {
      {"b", [](auto& a) { a.b = dev(DType::kFloat32, {kE, kN, kK}); }},
      {"b", [](auto& a) { a.b = dev(DType::kBFloat16, {kN, kK}); }},
      {"b", [](auto& a) { a.b = dev(DType::kBFloat16, {kE, kN, 44}); }},      // K % 8
      {"b", [](auto& a) { a.b = dev(DType::kBFloat16, {kE, 72, kK}); }},      // GLU N % 16
      {"b", [](auto& a) { a.b = dev(DType::kBFloat16, {0, kN, kK}); }},       // no experts
      {"b", [](auto& a) { a.b.device = Device::kCpu; }},
      {"b", [](auto& a) { a.b.data = static_cast<char*>(fake_ptr()) + 2; }},  // misaligned
      {"offsets", [](auto& a) { a.offsets = dev(DType::kInt32, {kE}); }},
      {"offsets", [](auto& a) { a.offsets = dev(DType::kInt64, {kE + 1}); }},
      {"a", [](auto& a) { a.a = dev(DType::kBFloat16, {kM, kK + 8}); }},
      {"a", [](auto& a) { a.a = dev(DType::kFloat16, {kM, kK}); }},
      {"d", [](auto& a) { a.d = dev(DType::kBFloat16, {kM, kN}); }},  // GLU halves N
      {"d", [](auto& a) { a.d = dev(DType::kBFloat16, {kM + 1, kN / 2}); }},
      {"d", [](auto& a) { a.d = dev(DType::kFloat8E4M3, {kM, kN / 2}); }},
      {"bias", [](auto& a) { a.bias = dev(DType::kBFloat16, {kE, kN}); }},
      {"bias", [](auto& a) { a.bias = dev(DType::kFloat32, {kE, kN / 2}); }},
      {"row_scale", [](auto& a) { a.row_scale = dev(DType::kFloat32, {kM - 1}); }},
      {"pre_activation", [](auto& a) { a.pre_activation = dev(DType::kBFloat16, {kM, kN / 2}); }},
      {"pre_activation", [](auto& a) { a.epilogue = GemmEpilogue::kLinear, a.d = dev(DType::kBFloat16, {kM, kN}); }},
      {"gather_index", [](auto& a) { a.gather_index = dev(DType::kInt32, {kM + 3}); }},
      {"max_ctas", [](auto& a) { a.max_ctas = -1; }},
      {"d", [](auto& a) {  // gather exists only with bf16 output
         a.gather_index = dev(DType::kInt32, {kM});
         a.d = dev(DType::kFloat32, {kM, kN / 2});
       }},
      // Outputs aliasing another argument (hostile input, docs/RELIABILITY.md).
      {"d", [](auto& a) { a.d.data = a.a.data; }},
      {"d", [](auto& a) { a.d.data = static_cast<char*>(a.b.data) + 64; }},
      {"d", [](auto& a) { a.d.data = a.row_scale.data; }},
      {"pre_activation", [](auto& a) { a.pre_activation.data = a.bias.data; }},
      {"d", [](auto& a) {  // d's last row is pre_activation's first
         a.d.data = static_cast<char*>(a.pre_activation.data) - (kM - 1) * (kN / 2) * 2;
       }},
      {"activation", [](auto& a) { a.activation = static_cast<Activation>(99); }},
      {"epilogue", [](auto& a) { a.epilogue = static_cast<GemmEpilogue>(7); }},
  };
  for (const Case& c : cases) {
    GroupedGemmArgs args = valid_fc1();
    c.spoil(args);
    SCOPED_TRACE("spoiled " + c.argument);
    expect_rejects(args, c.argument);
  }
}

TEST(GemmValidation, EntryPointsValidateBeforeAnyCudaCall) {
  GroupedGemmArgs args = valid_fc1();
  args.offsets = dev(DType::kInt32, {kE + 2});
  EXPECT_THROW(grouped_gemm(args, nullptr), InvalidArgument);
  EXPECT_THROW(grouped_gemm_unfused(args, {}, nullptr), InvalidArgument);
}

// The bf16 kernel's tile by N: 128 × 192 in four stages exactly where 192 divides N and 256 does
// not (gpt-oss's FC1 5760 and FC2 2880; a 384 or 576 test shape), else 128 × 256 in three
// (every other preset's N, and the tails of 400 or 520).
TEST(GemmValidation, TileWidthByN) {
  for (int64_t n : {192, 384, 576, 2880, 5760}) {
    const GroupedGemmTile t = grouped_gemm_tile(n);
    EXPECT_EQ(t.block_n, 192) << "N " << n;
    EXPECT_EQ(t.stages, 4) << "N " << n;
  }
  for (int64_t n : {256, 400, 520, 768, 1536, 2048, 4096, 7168, 14336, 28672}) {
    const GroupedGemmTile t = grouped_gemm_tile(n);
    EXPECT_EQ(t.block_n, 256) << "N " << n;
    EXPECT_EQ(t.stages, 3) << "N " << n;
  }
  EXPECT_EQ(grouped_gemm_tile(2880).block_m, 128);
  EXPECT_EQ(grouped_gemm_tile(2880).block_k, 64);
  for (int64_t n : {0, -192})
    test::expect_invalid([&] { grouped_gemm_tile(n); }, "n");
}

TEST(GemmValidation, UnfusedTwinNeedsItsScratch) {
  GroupedGemmArgs args = valid_fc1();
  args.pre_activation = {};
  try {
    grouped_gemm_unfused(args, {}, nullptr);
    FAIL() << "accepted a missing pre_activation";
  } catch (const InvalidArgument& e) {
    EXPECT_EQ(e.argument(), "pre_activation");
  }
  args = valid_fc1();
  args.gather_index = dev(DType::kInt32, {kM});
  try {
    grouped_gemm_unfused(args, {}, nullptr);
    FAIL() << "accepted a missing gathered_a";
  } catch (const InvalidArgument& e) {
    EXPECT_EQ(e.argument(), "scratch.gathered_a");
  }
}


// ---- MXFP8 (moefuse/grouped_gemm_fp8.h): the emulation's bf16 copies in the caller's workspace.

constexpr int64_t kMxK = 96;  // whole 32-element blocks

GroupedGemmFp8Args valid_mxfp8_fc1() {
  GroupedGemmFp8Args g{.a = dev(DType::kFloat8E4M3, {kM, kMxK}),
                       .a_scales = dev(DType::kFloat8E8M0, {kMxK / 32, mxfp8_scale_rows(kM)}),
                       .b = dev(DType::kFloat8E4M3, {kE, kN, kMxK}),
                       .b_scales = dev(DType::kFloat8E8M0, {kE, kMxK / 32, kN}),
                       .offsets = dev(DType::kInt32, {kE + 1}),
                       .d = dev(DType::kBFloat16, {kM, kN / 2}),
                       .epilogue = GemmEpilogue::kActivation,
                       .activation = Activation::kSwiGLU,
                       .row_scale = dev(DType::kFloat32, {kM}),
                       .bias = dev(DType::kFloat32, {kE, kN}),
                       .pre_activation = dev(DType::kBFloat16, {kM, kN}),
                       .recipe = Fp8Recipe::kMxfp8};
  g.workspace = {.data = fake_ptr(), .bytes = grouped_gemm_fp8_workspace_size(g)};
  return g;
}

TEST(GemmValidation, Mxfp8WorkspaceSizeIsTheTwoBf16CopiesAligned) {
  GroupedGemmFp8Args g = valid_mxfp8_fc1();
  // a: 100 · 96 · 2 = 19200 = 75 · 256; b: 4 · 64 · 96 · 2 = 49152 (always a multiple of
  // 1024: N % 16, K % 32).
  EXPECT_EQ(grouped_gemm_fp8_workspace_size(g), 19200u + 49152u);
  g.a = dev(DType::kFloat8E4M3, {101, kMxK});  // 19392 bytes, rounded up to 19456
  EXPECT_EQ(grouped_gemm_fp8_workspace_size(g), 19456u + 49152u);
  g.a = dev(DType::kFloat8E4M3, {0, kMxK});
  EXPECT_EQ(grouped_gemm_fp8_workspace_size(g), 49152u);
  g.recipe = Fp8Recipe::kDeepSeek;
  EXPECT_EQ(grouped_gemm_fp8_workspace_size(g), 0u);

  g = valid_mxfp8_fc1();
  g.recipe = static_cast<Fp8Recipe>(5);
  test::expect_invalid([&] { grouped_gemm_fp8_workspace_size(g); }, "recipe");
  g = valid_mxfp8_fc1();
  g.a = dev(DType::kFloat8E4M3, {kM * kMxK});
  test::expect_invalid([&] { grouped_gemm_fp8_workspace_size(g); }, "a");
  g = valid_mxfp8_fc1();
  g.b = dev(DType::kFloat8E4M3, {kE * kN, kMxK});
  test::expect_invalid([&] { grouped_gemm_fp8_workspace_size(g); }, "b");
}

TEST(GemmValidation, Mxfp8RejectsABadWorkspaceByName) {
  EXPECT_NO_THROW(validate_grouped_gemm_fp8(valid_mxfp8_fc1()));
  const size_t bytes = valid_mxfp8_fc1().workspace.bytes;
  const struct {
    std::string argument;
    std::function<void(GroupedGemmFp8Args&)> spoil;
  } cases[] = {
      {"workspace", [](auto& g) { g.workspace.bytes -= 1; }},
      {"workspace", [](auto& g) { g.workspace = {}; }},
      {"workspace", [](auto& g) { g.workspace.data = static_cast<char*>(g.workspace.data) + 16; }},
      // The copies overlapping an input or an output (the region the passes write).
      {"workspace", [](auto& g) { g.workspace.data = g.a.data; }},
      {"workspace", [](auto& g) { g.workspace.data = static_cast<char*>(g.b_scales.data) - 256; }},
      {"workspace", [](auto& g) { g.workspace.data = g.d.data; }},
      {"workspace", [=](auto& g) {  // the b copy's last bytes are pre_activation's first
         g.workspace.data = static_cast<char*>(g.pre_activation.data) - bytes + 256;
       }},
      // 8 bytes suffice for the FP8 kernel's epilogue, not for the BF16 GEMM it runs on.
      {"bias", [](auto& g) { g.bias.data = static_cast<char*>(g.bias.data) + 8; }},
  };
  for (const auto& c : cases) {
    GroupedGemmFp8Args g = valid_mxfp8_fc1();
    c.spoil(g);
    SCOPED_TRACE("spoiled " + c.argument);
    test::expect_invalid([&] { validate_grouped_gemm_fp8(g); }, c.argument);
    test::expect_invalid([&] { grouped_gemm_fp8(g, nullptr); }, c.argument);
  }
  // Larger than needed is fine; the bytes past the copies are not written, so may overlap.
  GroupedGemmFp8Args big = valid_mxfp8_fc1();
  big.workspace.bytes *= 2;
  big.workspace.data = static_cast<char*>(big.d.data) - bytes;
  EXPECT_NO_THROW(validate_grouped_gemm_fp8(big));
}

// E4M3 output is the DeepSeek recipe's: the MXFP8 emulation's BF16 GEMM has no such epilogue.
TEST(GemmValidation, Mxfp8RejectsE4m3OutputByName) {
  GroupedGemmFp8Args g = valid_mxfp8_fc1();
  g.d = dev(DType::kFloat8E4M3, {kM, kN / 2});
  g.d_scales = dev(DType::kFloat32, {fp8_scale_groups(kN / 2), fp8_scale_rows(kM)});
  test::expect_invalid([&] { validate_grouped_gemm_fp8(g); }, "d");
  test::expect_invalid([&] { grouped_gemm_fp8(g, nullptr); }, "d");
}

}  // namespace
}  // namespace moefuse
