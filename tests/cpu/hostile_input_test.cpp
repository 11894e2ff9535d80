// Hostile inputs caught on the host (docs/RELIABILITY.md): the byte-range overlap check every op
// uses for aliased outputs, token counts whose T·k would overflow int32 row indices, FP8
// quantisation of values far beyond e4m3's range, and valid calls without a Hopper GPU.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "common/test_util.h"
#include "cuda/device.h"
#include "cuda/layer/layer_args.h"
#include "moefuse/dispatch.h"
#include "moefuse/error.h"
#include "moefuse/grouped_gemm_backward.h"
#include "moefuse/grouped_gemm_fp8.h"
#include "moefuse/health.h"
#include "moefuse/tensor.h"
#include "ref/quant.h"

namespace moefuse {
namespace {

using test::expect_invalid;

TensorView at(uintptr_t address, DType dtype, std::initializer_list<int64_t> shape) {
  return TensorView::contiguous(reinterpret_cast<void*>(address), dtype, shape, Device::kCuda);
}

TEST(HostileInput, OverlapIsJudgedOnByteRanges) {
  const uintptr_t base = uintptr_t{1} << 40;
  const TensorView a = at(base, DType::kBFloat16, {4, 8});  // 64 bytes
  EXPECT_EQ(byte_span(a), 64);
  EXPECT_NO_THROW(expect_disjoint(a, "a", at(base + 64, DType::kFloat32, {16}), "b"));
  EXPECT_NO_THROW(expect_disjoint(at(base - 64, DType::kInt32, {16}), "b", a, "a"));
  expect_invalid([&] { expect_disjoint(a, "a", at(base + 63, DType::kFloat8E4M3, {1}), "b"); },
                 "a");
  expect_invalid([&] { expect_disjoint(at(base - 4, DType::kFloat32, {2}), "out", a, "in"); },
                 "out");
  // Empty or absent views overlap nothing, even at the same address.
  EXPECT_NO_THROW(expect_disjoint(a, "a", at(base, DType::kBFloat16, {0, 8}), "b"));
  EXPECT_NO_THROW(expect_disjoint(TensorView{}, "a", TensorView{}, "b"));
  // A strided view spans from its first to its last element: the transpose of a [4, 8] bf16.
  TensorView t = at(base, DType::kBFloat16, {8, 4});
  t.strides = {1, 8};
  EXPECT_EQ(byte_span(t), 64);
  expect_invalid([&] { expect_disjoint(t, "t", at(base + 62, DType::kBFloat16, {1}), "b"); },
                 "t");
}

TEST(HostileInput, OutputsAreCheckedAgainstOutputsAndInputs) {
  const uintptr_t base = uintptr_t{1} << 40;
  const NamedView outputs[] = {{at(base, DType::kFloat32, {16}), "d"},
                               {at(base + 1024, DType::kFloat32, {16}), "pre"}};
  const NamedView inputs[] = {{at(base + 4096, DType::kFloat32, {16}), "a"}};
  EXPECT_NO_THROW(expect_outputs_disjoint(outputs, inputs));
  const NamedView clash[] = {{at(base + 1024 + 60, DType::kFloat32, {4}), "a"}};
  expect_invalid([&] { expect_outputs_disjoint(outputs, clash); }, "pre");
  const NamedView twins[] = {{at(base, DType::kFloat32, {16}), "d"},
                             {at(base + 32, DType::kFloat32, {16}), "pre"}};
  expect_invalid([&] { expect_outputs_disjoint(twins, inputs); }, "d");
}

// The layer indexes its T·k routed rows with int32 (offsets, row_of, token_of_row): x is rejected
// before anything else is looked at once T·k reaches 2^31.
TEST(HostileInput, TokenCountWhoseRowsOverflowInt32IsRejected) {
  const MoeConfig c = preset("qwen3-30b-a3b");  // top_k 8
  const int64_t too_many = std::numeric_limits<int32_t>::max() / c.top_k + 1;
  const TensorView x = at(uintptr_t{1} << 40, DType::kBFloat16, {too_many, c.hidden});
  expect_invalid([&] { layer::check_layer_forward(c, {}, x, {}, {}, {}, {}, {}); }, "x");
  expect_invalid([&] { layer::check_layer_backward(c, {}, x, {}, {}, {}, {}, {}, {}); }, "x");
}

// Blockwise FP8 scales each group by 448 / amax, so no finite value can land beyond e4m3's 448:
// groups near FLT_MAX keep their largest element at ±448 (code 0x7E/0xFE) and round-trip finite.
// (NaN and Inf inputs: quant_ref_test.cpp TinyNaNAndInfGroups.)
TEST(HostileInput, Fp8BlockwiseGroupsNearFloatMaxStayFinite) {
  const float big = 1e38f;  // FLT_MAX / 3.4: 448 · (big / 448) stays finite
  std::vector<float> x = test::random_normal(256);
  for (float& v : x) v *= 1e37f;
  x[7] = big, x[128 + 9] = -big;
  std::vector<uint8_t> q(x.size());
  std::vector<float> scales(2), back(x.size());
  ref::quantize_fp8_blockwise_1x128(TensorView::contiguous(x.data(), DType::kFloat32, {2, 128}),
                                    TensorView::contiguous(q.data(), DType::kFloat8E4M3, {2, 128}),
                                    TensorView::contiguous(scales.data(), DType::kFloat32, {2, 1}));
  EXPECT_EQ(q[7], 0x7E);
  EXPECT_EQ(q[128 + 9], 0xFE);
  ref::dequantize_fp8_blockwise_1x128(
      TensorView::contiguous(q.data(), DType::kFloat8E4M3, {2, 128}),
      TensorView::contiguous(scales.data(), DType::kFloat32, {2, 1}),
      TensorView::contiguous(back.data(), DType::kFloat32, {2, 128}));
  for (size_t i = 0; i < x.size(); ++i) {
    ASSERT_TRUE(std::isfinite(back[i])) << "element " << i << ": x " << x[i];
    ASSERT_LE(std::fabs(double(back[i]) - double(x[i])),
              std::fabs(double(x[i])) * 0x1p-4 + double(scales[i / 128]) * 0x1p-9)
        << "element " << i;
  }
}

// Valid arguments (at fake device addresses) on a machine without an sm_90 GPU: the entry points
// validate, then refuse with NotSupported naming what they found, before any launch. (Bad
// arguments still get InvalidArgument first: every validation test here runs without a GPU.)
TEST(HostileInput, ValidCallWithoutHopperThrowsNotSupported) {
  std::string why;
  if (cuda::hopper_available(&why))
    GTEST_SKIP() << "a Hopper GPU is present: the call would launch on fake pointers";
  const uintptr_t base = uintptr_t{1} << 40;
  const int64_t E = 2, M = 32, K = 64, N = 48;
  const GroupedGemmDgradArgs dgrad{.a = at(base, DType::kBFloat16, {M, K}),
                                   .b = at(base * 2, DType::kBFloat16, {E, K, N}),
                                   .offsets = at(base * 3, DType::kInt32, {E + 1}),
                                   .d = at(base * 4, DType::kBFloat16, {M, N})};
  const TensorView health = at(base * 5, DType::kInt32, {1});
  GroupedGemmFp8Args mxfp8{
      .a = at(base * 6, DType::kFloat8E4M3, {M, K}),
      .a_scales = at(base * 7, DType::kFloat8E8M0, {K / 32, mxfp8_scale_rows(M)}),
      .b = at(base * 8, DType::kFloat8E4M3, {E, N, K}),
      .b_scales = at(base * 9, DType::kFloat8E8M0, {E, K / 32, N}),
      .offsets = at(base * 3, DType::kInt32, {E + 1}),
      .d = at(base * 10, DType::kFloat32, {M, N}),
      .recipe = Fp8Recipe::kMxfp8};
  mxfp8.workspace = {.data = reinterpret_cast<void*>(base * 11),
                     .bytes = grouped_gemm_fp8_workspace_size(mxfp8)};
  // combine_add with its term the output itself (in place: validation lets it through).
  const int64_t T = 4, H = 64, k = 2;
  const TensorView ys = at(base * 12, DType::kBFloat16, {T * k, H}),
                   probs = at(base * 13, DType::kFloat32, {T, k}),
                   row_of = at(base * 14, DType::kInt32, {T, k}),
                   y = at(base * 15, DType::kBFloat16, {T, H});
  const std::vector<std::pair<std::string, std::function<void()>>> calls = {
      {"grouped_gemm_dgrad", [&] { grouped_gemm_dgrad(dgrad, nullptr); }},
      {"grouped_gemm_fp8 (MXFP8: before its dequantise passes)",
       [&] { grouped_gemm_fp8(mxfp8, nullptr); }},
      {"reset_health_flags", [&] { reset_health_flags(health, nullptr); }},
      {"combine_add (in place)", [&] { combine_add(ys, probs, row_of, y, y, health, nullptr); }}};
  for (const auto& [name, call] : calls) {
    SCOPED_TRACE(name);
    try {
      call();
      ADD_FAILURE() << "no exception";
    } catch (const NotSupported& e) {
      const std::string what = e.what();
      EXPECT_TRUE(what.find("no CUDA device: ") == 0 ||
                  what.find("moefuse's kernels are built for sm_90a (Hopper); the current "
                            "device ") == 0)
          << what << " (hopper_available: " << why << ")";
    }
  }
}

}  // namespace
}  // namespace moefuse
