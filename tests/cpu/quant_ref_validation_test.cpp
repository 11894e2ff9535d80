// Every bad-input path of the CPU reference quantisation entry points throws InvalidArgument
// naming the argument.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "common/test_util.h"
#include "moefuse/error.h"
#include "ref/quant.h"

namespace moefuse::ref {
namespace {

using test::expect_invalid;

// Valid buffers for M = 2, K = 160 (two 1x128 groups, five MX blocks, ten NVFP4 blocks).
struct Buffers {
  static constexpr int64_t kM = 2, kK = 160;
  std::vector<float> x = test::random_normal(kM * kK);
  std::vector<float> out = std::vector<float>(kM * kK);
  std::vector<uint8_t> q = std::vector<uint8_t>(kM * kK);
  std::vector<float> f32_scales = std::vector<float>(kM * 5);
  std::vector<uint8_t> u8_scales = std::vector<uint8_t>(kM * 10);
  float tensor_scale = 1.0f;

  TensorView xv() { return TensorView::contiguous(x.data(), DType::kFloat32, {kM, kK}); }
  TensorView outv() { return TensorView::contiguous(out.data(), DType::kFloat32, {kM, kK}); }
  TensorView qv(DType t = DType::kFloat8E4M3) { return TensorView::contiguous(q.data(), t, {kM, kK}); }
  TensorView sv(int64_t groups) {
    return TensorView::contiguous(f32_scales.data(), DType::kFloat32, {kM, groups});
  }
  TensorView bv(DType t, int64_t groups) { return TensorView::contiguous(u8_scales.data(), t, {kM, groups}); }
  TensorView tsv() { return TensorView::contiguous(&tensor_scale, DType::kFloat32, {1}); }
};

TEST(QuantRefValidation, Blockwise1x128) {
  Buffers b;
  EXPECT_NO_THROW(quantize_fp8_blockwise_1x128(b.xv(), b.qv(), b.sv(2)));
  EXPECT_NO_THROW(dequantize_fp8_blockwise_1x128(b.qv(), b.sv(2), b.outv()));
  auto bf16_x = b.xv();
  bf16_x.dtype = DType::kBFloat16;
  expect_invalid([&] { quantize_fp8_blockwise_1x128(bf16_x, b.qv(), b.sv(2)); }, "x");
  auto gpu_x = b.xv();
  gpu_x.device = Device::kCuda;
  expect_invalid([&] { quantize_fp8_blockwise_1x128(gpu_x, b.qv(), b.sv(2)); }, "x");
  auto strided_x = b.xv();
  strided_x.strides = {1, 2};
  expect_invalid([&] { quantize_fp8_blockwise_1x128(strided_x, b.qv(), b.sv(2)); }, "x");
  auto null_x = b.xv();
  null_x.data = nullptr;
  expect_invalid([&] { quantize_fp8_blockwise_1x128(null_x, b.qv(), b.sv(2)); }, "x");
  auto rank3_x = TensorView::contiguous(b.x.data(), DType::kFloat32, {1, 2, 160});
  expect_invalid([&] { quantize_fp8_blockwise_1x128(rank3_x, b.qv(), b.sv(2)); }, "x");
  expect_invalid([&] { quantize_fp8_blockwise_1x128(b.xv(), b.qv(DType::kFloat8E5M2), b.sv(2)); }, "q");
  auto short_q = TensorView::contiguous(b.q.data(), DType::kFloat8E4M3, {2, 128});
  expect_invalid([&] { quantize_fp8_blockwise_1x128(b.xv(), short_q, b.sv(2)); }, "q");
  expect_invalid([&] { quantize_fp8_blockwise_1x128(b.xv(), b.qv(), b.sv(1)); }, "scales");
  expect_invalid([&] { quantize_fp8_blockwise_1x128(b.xv(), b.qv(), b.bv(DType::kFloat8E8M0, 2)); }, "scales");
  expect_invalid([&] { dequantize_fp8_blockwise_1x128(b.qv(DType::kInt32), b.sv(2), b.outv()); }, "q");
  expect_invalid([&] { dequantize_fp8_blockwise_1x128(b.qv(), b.sv(3), b.outv()); }, "scales");
  expect_invalid([&] { dequantize_fp8_blockwise_1x128(b.qv(), b.sv(2), short_q); }, "x");
}

TEST(QuantRefValidation, Blockwise128x128) {
  std::vector<float> w(3 * 130 * 10), out(w.size());
  std::vector<uint8_t> q(w.size());
  std::vector<float> s(3 * 2);
  auto wv = TensorView::contiguous(w.data(), DType::kFloat32, {3, 130, 10});
  auto qv = TensorView::contiguous(q.data(), DType::kFloat8E4M3, {3, 130, 10});
  auto sv = TensorView::contiguous(s.data(), DType::kFloat32, {3, 2, 1});
  auto outv = TensorView::contiguous(out.data(), DType::kFloat32, {3, 130, 10});
  EXPECT_NO_THROW(quantize_fp8_blockwise_128x128(wv, qv, sv));
  EXPECT_NO_THROW(dequantize_fp8_blockwise_128x128(qv, sv, outv));
  auto rank1 = TensorView::contiguous(w.data(), DType::kFloat32, {3900});
  expect_invalid([&] { quantize_fp8_blockwise_128x128(rank1, qv, sv); }, "w");
  auto rank4 = TensorView::contiguous(w.data(), DType::kFloat32, {1, 3, 130, 10});
  expect_invalid([&] { quantize_fp8_blockwise_128x128(rank4, qv, sv); }, "w");
  auto bf16_w = wv;
  bf16_w.dtype = DType::kBFloat16;
  expect_invalid([&] { quantize_fp8_blockwise_128x128(bf16_w, qv, sv); }, "w");
  auto rank2_q = TensorView::contiguous(q.data(), DType::kFloat8E4M3, {390, 10});
  expect_invalid([&] { quantize_fp8_blockwise_128x128(wv, rank2_q, sv); }, "q");
  auto flat_s = TensorView::contiguous(s.data(), DType::kFloat32, {2, 1});
  expect_invalid([&] { quantize_fp8_blockwise_128x128(wv, qv, flat_s); }, "scales");
  auto wrong_s = TensorView::contiguous(s.data(), DType::kFloat32, {3, 1, 2});
  expect_invalid([&] { quantize_fp8_blockwise_128x128(wv, qv, wrong_s); }, "scales");
  expect_invalid([&] { dequantize_fp8_blockwise_128x128(qv, wrong_s, outv); }, "scales");
  expect_invalid([&] { dequantize_fp8_blockwise_128x128(wv, sv, outv); }, "q");
  expect_invalid([&] { dequantize_fp8_blockwise_128x128(qv, sv, rank2_q); }, "w");
  // Rank 2 [N, K] with [ceil(N/128), ceil(K/128)] scales.
  auto w2 = TensorView::contiguous(w.data(), DType::kFloat32, {130, 10});
  auto q2 = TensorView::contiguous(q.data(), DType::kFloat8E4M3, {130, 10});
  EXPECT_NO_THROW(quantize_fp8_blockwise_128x128(w2, q2, flat_s));
  expect_invalid([&] { quantize_fp8_blockwise_128x128(w2, q2, sv); }, "scales");
}

TEST(QuantRefValidation, Mxfp8) {
  Buffers b;
  EXPECT_NO_THROW(quantize_mxfp8(b.xv(), b.qv(), b.bv(DType::kFloat8E8M0, 5)));
  EXPECT_NO_THROW(dequantize_mxfp8(b.qv(), b.bv(DType::kFloat8E8M0, 5), b.outv()));
  expect_invalid([&] { quantize_mxfp8(b.outv(), b.qv(DType::kFloat8E5M2), b.bv(DType::kFloat8E8M0, 5)); }, "q");
  expect_invalid([&] { quantize_mxfp8(b.xv(), b.qv(), b.bv(DType::kFloat8E4M3, 5)); }, "scales");
  expect_invalid([&] { quantize_mxfp8(b.xv(), b.qv(), b.bv(DType::kFloat8E8M0, 4)); }, "scales");
  auto cuda_x = b.xv();
  cuda_x.device = Device::kCuda;
  expect_invalid([&] { quantize_mxfp8(cuda_x, b.qv(), b.bv(DType::kFloat8E8M0, 5)); }, "x");
  expect_invalid([&] { dequantize_mxfp8(b.xv(), b.bv(DType::kFloat8E8M0, 5), b.outv()); }, "q");
  expect_invalid([&] { dequantize_mxfp8(b.qv(), b.bv(DType::kFloat8E8M0, 6), b.outv()); }, "scales");
  expect_invalid([&] { dequantize_mxfp8(b.qv(), b.bv(DType::kFloat8E8M0, 5), b.qv()); }, "x");
}

TEST(QuantRefValidation, Nvfp4) {
  Buffers b;
  const DType fp4 = DType::kFloat4E2M1, e4m3 = DType::kFloat8E4M3;
  EXPECT_NO_THROW(quantize_nvfp4(b.xv(), b.qv(fp4), b.bv(e4m3, 10), b.tsv()));
  EXPECT_NO_THROW(dequantize_nvfp4(b.qv(fp4), b.bv(e4m3, 10), b.tsv(), b.outv()));
  auto odd_x = TensorView::contiguous(b.x.data(), DType::kFloat32, {2, 159});
  auto odd_q = TensorView::contiguous(b.q.data(), fp4, {2, 159});
  expect_invalid([&] { quantize_nvfp4(odd_x, odd_q, b.bv(e4m3, 10), b.tsv()); }, "x");
  expect_invalid([&] { quantize_nvfp4(b.xv(), b.qv(), b.bv(e4m3, 10), b.tsv()); }, "q");
  expect_invalid([&] { quantize_nvfp4(b.xv(), b.qv(fp4), b.bv(DType::kFloat8E8M0, 10), b.tsv()); },
                 "block_scales");
  expect_invalid([&] { quantize_nvfp4(b.xv(), b.qv(fp4), b.bv(e4m3, 9), b.tsv()); }, "block_scales");
  auto ts2 = TensorView::contiguous(b.f32_scales.data(), DType::kFloat32, {2});
  expect_invalid([&] { quantize_nvfp4(b.xv(), b.qv(fp4), b.bv(e4m3, 10), ts2); }, "tensor_scale");
  auto null_ts = b.tsv();
  null_ts.data = nullptr;
  expect_invalid([&] { quantize_nvfp4(b.xv(), b.qv(fp4), b.bv(e4m3, 10), null_ts); }, "tensor_scale");
  expect_invalid([&] { dequantize_nvfp4(odd_q, b.bv(e4m3, 10), b.tsv(), odd_x); }, "q");
  expect_invalid([&] { dequantize_nvfp4(b.qv(), b.bv(e4m3, 10), b.tsv(), b.outv()); }, "q");
  expect_invalid([&] { dequantize_nvfp4(b.qv(fp4), b.bv(e4m3, 11), b.tsv(), b.outv()); }, "block_scales");
  expect_invalid([&] { dequantize_nvfp4(b.qv(fp4), b.bv(e4m3, 10), ts2, b.outv()); }, "tensor_scale");
  expect_invalid([&] { dequantize_nvfp4(b.qv(fp4), b.bv(e4m3, 10), b.tsv(), b.qv()); }, "x");
}

TEST(QuantRefValidation, Nvfp4WithAmax) {
  Buffers b;
  const DType fp4 = DType::kFloat4E2M1, e4m3 = DType::kFloat8E4M3;
  float amax = 1.0f;
  const auto av = TensorView::contiguous(&amax, DType::kFloat32, {1});
  auto call = [&](const TensorView& a, const TensorView& ts) {
    quantize_nvfp4_with_amax(b.xv(), b.qv(fp4), b.bv(e4m3, 10), a, ts);
  };
  EXPECT_NO_THROW(call(av, b.tsv()));
  auto bf16_amax = av;
  bf16_amax.dtype = DType::kBFloat16;
  expect_invalid([&] { call(bf16_amax, b.tsv()); }, "amax");
  expect_invalid([&] { call(TensorView::contiguous(b.x.data(), DType::kFloat32, {2}), b.tsv()); },
                 "amax");
  expect_invalid([&] { call(TensorView::contiguous(&amax, DType::kFloat32, {1, 1}), b.tsv()); },
                 "amax");
  auto cuda_amax = av;
  cuda_amax.device = Device::kCuda;
  expect_invalid([&] { call(cuda_amax, b.tsv()); }, "amax");
  auto null_amax = av;
  null_amax.data = nullptr;
  expect_invalid([&] { call(null_amax, b.tsv()); }, "amax");
  expect_invalid([&] { call(b.tsv(), b.tsv()); }, "tensor_scale");
  // The other views are checked as quantize_nvfp4 checks them.
  auto odd_x = TensorView::contiguous(b.x.data(), DType::kFloat32, {2, 159});
  auto odd_q = TensorView::contiguous(b.q.data(), fp4, {2, 159});
  expect_invalid([&] { quantize_nvfp4_with_amax(odd_x, odd_q, b.bv(e4m3, 10), av, b.tsv()); },
                 "x");
  expect_invalid([&] { quantize_nvfp4_with_amax(b.xv(), b.qv(), b.bv(e4m3, 10), av, b.tsv()); },
                 "q");
  expect_invalid([&] { quantize_nvfp4_with_amax(b.xv(), b.qv(fp4), b.bv(e4m3, 9), av, b.tsv()); },
                 "block_scales");
}

}  // namespace
}  // namespace moefuse::ref
