#include <gtest/gtest.h>

#include "moefuse/error.h"
#include "moefuse/tensor.h"

namespace moefuse {
namespace {

TEST(TensorView, ContiguousHasRowMajorStrides) {
  float buf[24];
  auto t = TensorView::contiguous(buf, DType::kFloat32, {2, 3, 4});
  EXPECT_EQ(t.rank, 3);
  EXPECT_EQ(t.numel(), 24);
  EXPECT_EQ(t.stride(0), 12);
  EXPECT_EQ(t.stride(1), 4);
  EXPECT_EQ(t.stride(2), 1);
  EXPECT_TRUE(t.is_contiguous());
  EXPECT_EQ(shape_string(t), "[2, 3, 4]");
}

TEST(TensorView, RejectsNegativeExtentAndHighRank) {
  EXPECT_THROW(TensorView::contiguous(nullptr, DType::kFloat32, {2, -1}), InvalidArgument);
  EXPECT_THROW(TensorView::contiguous(nullptr, DType::kFloat32, {1, 1, 1, 1, 1}), InvalidArgument);
}

TEST(ExpectTensor, NamesArgumentExpectedAndActual) {
  float buf[8];
  auto t = TensorView::contiguous(buf, DType::kFloat32, {2, 4});
  try {
    expect_tensor(t, "x", DType::kFloat32, Device::kCpu, {2, 8});
    FAIL() << "no throw";
  } catch (const InvalidArgument& e) {
    EXPECT_EQ(e.argument(), "x");
    EXPECT_EQ(e.expected(), "shape [2, 8]");
    EXPECT_EQ(e.actual(), "shape [2, 4]");
    EXPECT_NE(std::string(e.what()).find("'x'"), std::string::npos);
  }
}

TEST(ExpectTensor, ChecksDtypeDeviceRankStridesAndNull) {
  float buf[8];
  auto t = TensorView::contiguous(buf, DType::kFloat32, {2, 4});
  EXPECT_NO_THROW(expect_tensor(t, "x", DType::kFloat32, Device::kCpu, {kAnyExtent, 4}));
  EXPECT_THROW(expect_tensor(t, "x", DType::kBFloat16, Device::kCpu, {2, 4}), InvalidArgument);
  EXPECT_THROW(expect_tensor(t, "x", DType::kFloat32, Device::kCuda, {2, 4}), InvalidArgument);
  EXPECT_THROW(expect_tensor(t, "x", DType::kFloat32, Device::kCpu, {8}), InvalidArgument);
  auto strided = t;
  strided.strides = {1, 2};
  EXPECT_THROW(expect_tensor(strided, "x", DType::kFloat32, Device::kCpu, {2, 4}), InvalidArgument);
  auto null = TensorView::contiguous(nullptr, DType::kFloat32, {2, 4});
  EXPECT_THROW(expect_tensor(null, "x", DType::kFloat32, Device::kCpu, {2, 4}), InvalidArgument);
  auto empty = TensorView::contiguous(nullptr, DType::kFloat32, {0, 4});
  EXPECT_NO_THROW(expect_tensor(empty, "x", DType::kFloat32, Device::kCpu, {0, 4}));
}

TEST(TensorView, AbsentMeansNoData) {
  float buf[4];
  EXPECT_TRUE(is_absent(TensorView{}));
  EXPECT_TRUE(is_absent(TensorView::contiguous(nullptr, DType::kFloat32, {0, 4})));
  EXPECT_FALSE(is_absent(TensorView::contiguous(buf, DType::kFloat32, {4})));
  EXPECT_FALSE(is_absent(TensorView::contiguous(nullptr, DType::kFloat32, {2, 4})));
}

TEST(ExpectAligned, NamesArgumentAndMisalignment) {
  alignas(16) unsigned char buf[64];
  EXPECT_NO_THROW(expect_aligned(TensorView::contiguous(buf, DType::kBFloat16, {8}), "a"));
  try {
    expect_aligned(TensorView::contiguous(buf + 4, DType::kBFloat16, {8}), "a");
    FAIL() << "no throw";
  } catch (const InvalidArgument& e) {
    EXPECT_EQ(e.argument(), "a");
    EXPECT_EQ(e.expected(), "a 16-byte aligned data pointer");
    EXPECT_EQ(e.actual(), "a pointer misaligned by 4 bytes");
  }
  EXPECT_NO_THROW(expect_aligned(TensorView::contiguous(buf + 4, DType::kFloat32, {8}), "a", 4));
}

TEST(DType, SizesAndNames) {
  EXPECT_EQ(dtype_bits(DType::kFloat4E2M1), 4);
  EXPECT_EQ(dtype_bits(DType::kFloat8E8M0), 8);
  EXPECT_EQ(dtype_bits(DType::kBFloat16), 16);
  EXPECT_EQ(dtype_name(DType::kFloat8E4M3), "fp8_e4m3");
}

}  // namespace
}  // namespace moefuse
