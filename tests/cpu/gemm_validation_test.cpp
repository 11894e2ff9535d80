// Argument validation of the grouped GEMM: every bad input throws InvalidArgument naming the
// argument, before any CUDA call (so these run without a GPU).
#include <gtest/gtest.h>

#include <cstdint>
#include <functional>
#include <string>

#include "common/test_util.h"
#include "moefuse/error.h"
#include "moefuse/grouped_gemm.h"

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

}  // namespace
}  // namespace moefuse
