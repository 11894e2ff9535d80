// GPU quantise / dequantise against the CPU reference, byte for byte: fresh wide-range random
// data with NaN, Inf and all-zero groups, bf16 and fp32 inputs, sizes with short last groups,
// a single row, more rows than the grid has warps (the grid-stride loop), rows longer than one
// step of the row kernels with a short tail. Outputs are poisoned (0xFF bytes: NaN floats, codes
// no quantiser emits) before each launch. The device codecs the kernels use in place of the
// reference's scalar ones (hardware E4M3 conversions, the fast E2M1 encoder) are checked against
// the reference codecs on every fp32 input (QuantGpuCodec).
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "common/test_util.h"
#include "cuda/check.h"
#include "cuda/quant/dequant_kernel.cuh"
#include "cuda/quant/vec16.cuh"
#include "formats/recipes.h"
#include "moefuse/error.h"
#include "moefuse/quant.h"
#include "ref/quant.h"

namespace moefuse {
namespace {

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// A device buffer freed on scope exit, filled with 0xFF on creation.
struct DeviceBuffer {
  void* ptr = nullptr;
  size_t bytes = 0;
  explicit DeviceBuffer(size_t n) : bytes(n) {
    MOEFUSE_CUDA_CHECK(cudaMalloc(&ptr, n ? n : 1));
    MOEFUSE_CUDA_CHECK(cudaMemset(ptr, 0xFF, n ? n : 1));
  }
  ~DeviceBuffer() { cudaFree(ptr); }
  template <class T>
  std::vector<T> download() const {
    std::vector<T> h(bytes / sizeof(T));
    MOEFUSE_CUDA_CHECK(cudaMemcpy(h.data(), ptr, bytes, cudaMemcpyDeviceToHost));
    return h;
  }
  template <class T>
  void upload(const std::vector<T>& h) {
    MOEFUSE_CUDA_CHECK(cudaMemcpy(ptr, h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice));
  }
  TensorView view(DType t, std::initializer_list<int64_t> shape) const {
    return TensorView::contiguous(ptr, t, shape, Device::kCuda);
  }
};

uint16_t bf16_bits_rne(float x) {
  uint32_t u;
  std::memcpy(&u, &x, 4);
  if ((u & 0x7FFFFFFFu) > 0x7F800000u) return uint16_t((u >> 16) | 0x40);
  return uint16_t((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
}
float bf16_to_float(uint16_t b) {
  uint32_t u = uint32_t(b) << 16;
  float x;
  std::memcpy(&x, &u, 4);
  return x;
}

// Wide dynamic range (2^-20 .. 2^20 by group), a few NaN/Inf, and all-zero stretches of
// `zero_run` elements at the start of some rows.
std::vector<float> test_data(int64_t rows, int64_t cols, int64_t zero_run, bool specials) {
  auto v = test::random_normal(rows * cols);
  auto e = test::random_uniform(rows * cols / 16 + 1, -20.0f, 20.0f);
  for (int64_t i = 0; i < rows * cols; ++i) v[i] = std::ldexp(v[i], int(e[i / 16]));
  for (int64_t r = 1; r < rows; r += 3)
    for (int64_t c = 0; c < std::min(cols, zero_run); ++c) v[r * cols + c] = 0.0f;
  if (specials && rows * cols > 100) {
    v[17] = std::numeric_limits<float>::quiet_NaN();
    v[rows * cols - 5] = -std::numeric_limits<float>::infinity();
    v[rows * cols / 2] = std::numeric_limits<float>::infinity();
  }
  return v;
}

// The input as the GPU sees it (bf16 or fp32) and as the CPU reference sees it (fp32, exact).
struct Input {
  std::vector<float> ref;
  DeviceBuffer dev;
  DType dtype;
  Input(std::vector<float> x, DType t)
      : dev(x.size() * (t == DType::kBFloat16 ? 2 : 4)), dtype(t) {
    if (t == DType::kBFloat16) {
      std::vector<uint16_t> b(x.size());
      for (size_t i = 0; i < x.size(); ++i) b[i] = bf16_bits_rne(x[i]), x[i] = bf16_to_float(b[i]);
      dev.upload(b);
    } else {
      dev.upload(x);
    }
    ref = std::move(x);
  }
};

// Byte-exact comparison; reports the count and the first few mismatches with row and column.
void expect_same_bytes(const std::vector<uint8_t>& got, const std::vector<uint8_t>& want,
                       int64_t row_bytes, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  int64_t bad = 0;
  for (size_t i = 0; i < got.size(); ++i)
    if (got[i] != want[i] && bad++ < 5)
      ADD_FAILURE() << what << ": byte " << i << " (row " << int64_t(i) / row_bytes << ", byte "
                    << int64_t(i) % row_bytes << ") gpu 0x" << std::hex << int(got[i])
                    << " cpu 0x" << int(want[i]) << std::dec;
  EXPECT_EQ(bad, 0) << what << ": " << bad << " of " << got.size() << " bytes differ";
}

// Dequantised values: identical bits, except that any two NaNs match (x86 and the GPU produce
// different NaN payloads for 0 * Inf).
void expect_same_floats(const std::vector<float>& got, const std::vector<float>& want,
                        int64_t cols, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  int64_t bad = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    uint32_t g, w;
    std::memcpy(&g, &got[i], 4);
    std::memcpy(&w, &want[i], 4);
    if (g == w || (std::isnan(got[i]) && std::isnan(want[i]))) continue;
    if (bad++ < 5)
      ADD_FAILURE() << what << ": element " << i << " (row " << int64_t(i) / cols << ", col "
                    << int64_t(i) % cols << ") gpu " << got[i] << " cpu " << want[i];
  }
  EXPECT_EQ(bad, 0) << what << ": " << bad << " of " << got.size() << " values differ";
}

template <class T>
std::vector<uint8_t> as_bytes(const std::vector<T>& v) {
  std::vector<uint8_t> b(v.size() * sizeof(T));
  std::memcpy(b.data(), v.data(), b.size());
  return b;
}

TensorView host(std::vector<float>& v, std::initializer_list<int64_t> s) {
  return TensorView::contiguous(v.data(), DType::kFloat32, s);
}
TensorView host(std::vector<uint8_t>& v, DType t, std::initializer_list<int64_t> s) {
  return TensorView::contiguous(v.data(), t, s);
}

struct Shape {
  int64_t m, k;
};
// 2880 = 22.5 x 128 (short last 1x128 group), 48 = 1.5 x 32, 37 rows (not a multiple of anything);
// 7184 = 3.5 steps of 2048 (bf16) / 7 of 1024 (fp32) columns with a 16-column last group; 9000 rows
// exceed one warp per row of the largest grid (132 SMs x 8 CTAs x 8 warps), so warps loop.
const Shape kShapes[] = {{37, 2880}, {5, 48}, {128, 7168}, {1, 16}, {3, 7184}, {9000, 32}};
const DType kInputs[] = {DType::kBFloat16, DType::kFloat32};

TEST(QuantGpu, Blockwise1x128MatchesReferenceBytes) {
  MOEFUSE_REQUIRE_HOPPER();
  for (DType in : kInputs)
    for (Shape s : kShapes) {
      SCOPED_TRACE("x [" + std::to_string(s.m) + ", " + std::to_string(s.k) + "] " +
                   std::string(dtype_name(in)) + ", seed " + std::to_string(test::seed()));
      const int64_t g = ceil_div(s.k, 128);
      Input x(test_data(s.m, s.k, 128, true), in);
      DeviceBuffer q(s.m * s.k), sc(s.m * g * 4), back(s.m * s.k * 4);
      quantize_fp8_blockwise_1x128(x.dev.view(in, {s.m, s.k}), q.view(DType::kFloat8E4M3, {s.m, s.k}),
                                   sc.view(DType::kFloat32, {s.m, g}), nullptr);
      std::vector<uint8_t> rq(s.m * s.k);
      std::vector<float> rs(s.m * g), rback(s.m * s.k);
      ref::quantize_fp8_blockwise_1x128(host(x.ref, {s.m, s.k}), host(rq, DType::kFloat8E4M3, {s.m, s.k}),
                                        host(rs, {s.m, g}));
      expect_same_bytes(q.download<uint8_t>(), rq, s.k, "values");
      expect_same_bytes(as_bytes(sc.download<float>()), as_bytes(rs), g * 4, "scales");
      dequantize_fp8_blockwise_1x128(q.view(DType::kFloat8E4M3, {s.m, s.k}),
                                     sc.view(DType::kFloat32, {s.m, g}),
                                     back.view(DType::kFloat32, {s.m, s.k}), nullptr);
      ref::dequantize_fp8_blockwise_1x128(host(rq, DType::kFloat8E4M3, {s.m, s.k}), host(rs, {s.m, g}),
                                          host(rback, {s.m, s.k}));
      expect_same_floats(back.download<float>(), rback, s.k, "dequantised");
    }
}

TEST(QuantGpu, Mxfp8MatchesReferenceBytes) {
  MOEFUSE_REQUIRE_HOPPER();
  for (DType in : kInputs)
    for (Shape s : kShapes) {
      SCOPED_TRACE("x [" + std::to_string(s.m) + ", " + std::to_string(s.k) + "] " +
                   std::string(dtype_name(in)) + ", seed " + std::to_string(test::seed()));
      const int64_t g = ceil_div(s.k, 32);
      Input x(test_data(s.m, s.k, 32, true), in);
      DeviceBuffer q(s.m * s.k), sc(s.m * g), back(s.m * s.k * 4);
      quantize_mxfp8(x.dev.view(in, {s.m, s.k}), q.view(DType::kFloat8E4M3, {s.m, s.k}),
                     sc.view(DType::kFloat8E8M0, {s.m, g}), nullptr);
      std::vector<uint8_t> rq(s.m * s.k), rs(s.m * g);
      std::vector<float> rback(s.m * s.k);
      ref::quantize_mxfp8(host(x.ref, {s.m, s.k}), host(rq, DType::kFloat8E4M3, {s.m, s.k}),
                          host(rs, DType::kFloat8E8M0, {s.m, g}));
      expect_same_bytes(q.download<uint8_t>(), rq, s.k, "values");
      expect_same_bytes(sc.download<uint8_t>(), rs, g, "scales");
      dequantize_mxfp8(q.view(DType::kFloat8E4M3, {s.m, s.k}), sc.view(DType::kFloat8E8M0, {s.m, g}),
                       back.view(DType::kFloat32, {s.m, s.k}), nullptr);
      ref::dequantize_mxfp8(host(rq, DType::kFloat8E4M3, {s.m, s.k}), host(rs, DType::kFloat8E8M0, {s.m, g}),
                            host(rback, {s.m, s.k}));
      expect_same_floats(back.download<float>(), rback, s.k, "dequantised");
    }
}

TEST(QuantGpu, Nvfp4MatchesReferenceBytes) {
  MOEFUSE_REQUIRE_HOPPER();
  for (DType in : kInputs)
    for (Shape s : kShapes)
      for (bool specials : {false, true}) {  // an Inf makes the tensor scale 1: test both
        SCOPED_TRACE("x [" + std::to_string(s.m) + ", " + std::to_string(s.k) + "] " +
                     std::string(dtype_name(in)) + (specials ? " with NaN/Inf" : "") +
                     ", seed " + std::to_string(test::seed()));
        const int64_t g = ceil_div(s.k, 16);
        Input x(test_data(s.m, s.k, 16, specials), in);
        DeviceBuffer q(s.m * s.k / 2), sc(s.m * g), amax(4), ts(4), back(s.m * s.k * 4);
        quantize_nvfp4(x.dev.view(in, {s.m, s.k}), q.view(DType::kFloat4E2M1, {s.m, s.k}),
                       sc.view(DType::kFloat8E4M3, {s.m, g}), amax.view(DType::kFloat32, {1}),
                       ts.view(DType::kFloat32, {1}), nullptr);
        std::vector<uint8_t> rq(s.m * s.k / 2), rs(s.m * g);
        std::vector<float> rts(1), rback(s.m * s.k);
        ref::quantize_nvfp4(host(x.ref, {s.m, s.k}), host(rq, DType::kFloat4E2M1, {s.m, s.k}),
                            host(rs, DType::kFloat8E4M3, {s.m, g}), host(rts, {1}));
        expect_same_bytes(as_bytes(ts.download<float>()), as_bytes(rts), 4, "tensor scale");
        expect_same_bytes(q.download<uint8_t>(), rq, s.k / 2, "values");
        expect_same_bytes(sc.download<uint8_t>(), rs, g, "block scales");
        dequantize_nvfp4(q.view(DType::kFloat4E2M1, {s.m, s.k}), sc.view(DType::kFloat8E4M3, {s.m, g}),
                         ts.view(DType::kFloat32, {1}), back.view(DType::kFloat32, {s.m, s.k}), nullptr);
        ref::dequantize_nvfp4(host(rq, DType::kFloat4E2M1, {s.m, s.k}), host(rs, DType::kFloat8E4M3, {s.m, g}),
                              host(rts, {1}), host(rback, {s.m, s.k}));
        expect_same_floats(back.download<float>(), rback, s.k, "dequantised");
      }
}

// quantize_nvfp4_with_amax: given the amax quantize_nvfp4 computed on the device, the same bytes
// as quantize_nvfp4; given half the true amax (blocks saturate) or twice it, the reference's bytes.
// The given amax is an input: it must come back unchanged.
TEST(QuantGpu, Nvfp4WithAmaxMatchesQuantizeAndReference) {
  MOEFUSE_REQUIRE_HOPPER();
  for (DType in : kInputs)
    for (Shape s : kShapes)
      for (bool specials : {false, true}) {  // with an Inf, every given amax is Inf
        SCOPED_TRACE("x [" + std::to_string(s.m) + ", " + std::to_string(s.k) + "] " +
                     std::string(dtype_name(in)) + (specials ? " with NaN/Inf" : "") +
                     ", seed " + std::to_string(test::seed()));
        const int64_t g = ceil_div(s.k, 16);
        Input x(test_data(s.m, s.k, 16, specials), in);
        const TensorView xv = x.dev.view(in, {s.m, s.k});
        DeviceBuffer q(s.m * s.k / 2), sc(s.m * g), amax(4), ts(4);
        DeviceBuffer gq(s.m * s.k / 2), gsc(s.m * g), gts(4);
        quantize_nvfp4(xv, q.view(DType::kFloat4E2M1, {s.m, s.k}),
                       sc.view(DType::kFloat8E4M3, {s.m, g}), amax.view(DType::kFloat32, {1}),
                       ts.view(DType::kFloat32, {1}), nullptr);
        quantize_nvfp4_with_amax(xv, gq.view(DType::kFloat4E2M1, {s.m, s.k}),
                                 gsc.view(DType::kFloat8E4M3, {s.m, g}),
                                 amax.view(DType::kFloat32, {1}), gts.view(DType::kFloat32, {1}),
                                 nullptr);
        expect_same_bytes(as_bytes(gts.download<float>()), as_bytes(ts.download<float>()), 4,
                          "tensor scale, true amax");
        expect_same_bytes(gq.download<uint8_t>(), q.download<uint8_t>(), s.k / 2,
                          "values, true amax");
        expect_same_bytes(gsc.download<uint8_t>(), sc.download<uint8_t>(), g,
                          "block scales, true amax");
        uint32_t true_amax = 0;
        for (float v : x.ref) true_amax = formats::max_bits(true_amax, formats::amax_bits(v));
        for (float factor : {0.5f, 2.0f}) {
          SCOPED_TRACE("given amax = " + std::to_string(factor) + " x true amax");
          std::vector<float> given = {formats::bits_float(true_amax) * factor};
          DeviceBuffer damax(4), fq(s.m * s.k / 2), fsc(s.m * g), fts(4);
          damax.upload(given);
          quantize_nvfp4_with_amax(xv, fq.view(DType::kFloat4E2M1, {s.m, s.k}),
                                   fsc.view(DType::kFloat8E4M3, {s.m, g}),
                                   damax.view(DType::kFloat32, {1}),
                                   fts.view(DType::kFloat32, {1}), nullptr);
          std::vector<uint8_t> rq(s.m * s.k / 2), rs(s.m * g);
          std::vector<float> rts(1);
          ref::quantize_nvfp4_with_amax(host(x.ref, {s.m, s.k}),
                                        host(rq, DType::kFloat4E2M1, {s.m, s.k}),
                                        host(rs, DType::kFloat8E4M3, {s.m, g}), host(given, {1}),
                                        host(rts, {1}));
          expect_same_bytes(as_bytes(fts.download<float>()), as_bytes(rts), 4, "tensor scale");
          expect_same_bytes(fq.download<uint8_t>(), rq, s.k / 2, "values");
          expect_same_bytes(fsc.download<uint8_t>(), rs, g, "block scales");
          expect_same_bytes(as_bytes(damax.download<float>()), as_bytes(given), 4, "given amax");
        }
      }
}

TEST(QuantGpu, Blockwise128x128MatchesReferenceBytes) {
  MOEFUSE_REQUIRE_HOPPER();
  struct W { int64_t e, n, k; };
  for (DType in : kInputs)
    for (W s : {W{3, 200, 2880}, W{1, 128, 256}, W{2, 7, 48}}) {
      SCOPED_TRACE("w [" + std::to_string(s.e) + ", " + std::to_string(s.n) + ", " +
                   std::to_string(s.k) + "] " + std::string(dtype_name(in)) + ", seed " +
                   std::to_string(test::seed()));
      const int64_t bn = ceil_div(s.n, 128), bk = ceil_div(s.k, 128), numel = s.e * s.n * s.k;
      Input w(test_data(s.e * s.n, s.k, 16, true), in);
      DeviceBuffer q(numel), sc(s.e * bn * bk * 4), back(numel * 4);
      quantize_fp8_blockwise_128x128(w.dev.view(in, {s.e, s.n, s.k}),
                                     q.view(DType::kFloat8E4M3, {s.e, s.n, s.k}),
                                     sc.view(DType::kFloat32, {s.e, bn, bk}), nullptr);
      std::vector<uint8_t> rq(numel);
      std::vector<float> rs(s.e * bn * bk), rback(numel);
      ref::quantize_fp8_blockwise_128x128(host(w.ref, {s.e, s.n, s.k}),
                                          host(rq, DType::kFloat8E4M3, {s.e, s.n, s.k}),
                                          host(rs, {s.e, bn, bk}));
      expect_same_bytes(q.download<uint8_t>(), rq, s.k, "values");
      expect_same_bytes(as_bytes(sc.download<float>()), as_bytes(rs), bk * 4, "scales");
      dequantize_fp8_blockwise_128x128(q.view(DType::kFloat8E4M3, {s.e, s.n, s.k}),
                                       sc.view(DType::kFloat32, {s.e, bn, bk}),
                                       back.view(DType::kFloat32, {s.e, s.n, s.k}), nullptr);
      ref::dequantize_fp8_blockwise_128x128(host(rq, DType::kFloat8E4M3, {s.e, s.n, s.k}),
                                            host(rs, {s.e, bn, bk}), host(rback, {s.e, s.n, s.k}));
      expect_same_floats(back.download<float>(), rback, s.k, "dequantised");
    }
}

// 4096 x 2304: 589,824 vectors, more than two grid-stride steps of the amax kernel's largest
// grid (132 SMs x 8 CTAs x 256 threads x 2 fp32 vectors), so its loop and tail run.
TEST(QuantGpu, Nvfp4LargeTensorMatchesReferenceBytes) {
  MOEFUSE_REQUIRE_HOPPER();
  const int64_t m = 4096, k = 2304, g = k / 16;
  for (DType in : kInputs) {
    SCOPED_TRACE(std::string(dtype_name(in)) + ", seed " + std::to_string(test::seed()));
    Input x(test_data(m, k, 16, false), in);
    DeviceBuffer q(m * k / 2), sc(m * g), amax(4), ts(4);
    quantize_nvfp4(x.dev.view(in, {m, k}), q.view(DType::kFloat4E2M1, {m, k}),
                   sc.view(DType::kFloat8E4M3, {m, g}), amax.view(DType::kFloat32, {1}),
                   ts.view(DType::kFloat32, {1}), nullptr);
    std::vector<uint8_t> rq(m * k / 2), rs(m * g);
    std::vector<float> rts(1);
    ref::quantize_nvfp4(host(x.ref, {m, k}), host(rq, DType::kFloat4E2M1, {m, k}),
                        host(rs, DType::kFloat8E4M3, {m, g}), host(rts, {1}));
    expect_same_bytes(as_bytes(ts.download<float>()), as_bytes(rts), 4, "tensor scale");
    expect_same_bytes(q.download<uint8_t>(), rq, k / 2, "values");
    expect_same_bytes(sc.download<uint8_t>(), rs, g, "block scales");
  }
}

TEST(QuantGpu, Nvfp4CapturesInACudaGraphAndReplaysOnNewData) {
  MOEFUSE_REQUIRE_HOPPER();
  const int64_t m = 33, k = 96, g = k / 16;
  Input x(test_data(m, k, 16, false), DType::kBFloat16);
  DeviceBuffer q(m * k / 2), sc(m * g), amax(4), ts(4);
  cudaStream_t stream;
  MOEFUSE_CUDA_CHECK(cudaStreamCreate(&stream));
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  MOEFUSE_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  quantize_nvfp4(x.dev.view(DType::kBFloat16, {m, k}), q.view(DType::kFloat4E2M1, {m, k}),
                 sc.view(DType::kFloat8E4M3, {m, g}), amax.view(DType::kFloat32, {1}),
                 ts.view(DType::kFloat32, {1}), stream);
  MOEFUSE_CUDA_CHECK(cudaStreamEndCapture(stream, &graph));
  MOEFUSE_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
  for (int replay = 0; replay < 2; ++replay) {
    SCOPED_TRACE("replay " + std::to_string(replay) + ", seed " + std::to_string(test::seed()));
    Input fresh(test_data(m, k, 16, false), DType::kBFloat16);
    MOEFUSE_CUDA_CHECK(cudaMemcpy(x.dev.ptr, fresh.dev.ptr, m * k * 2, cudaMemcpyDeviceToDevice));
    MOEFUSE_CUDA_CHECK(cudaGraphLaunch(exec, stream));
    MOEFUSE_CUDA_CHECK(cudaStreamSynchronize(stream));
    std::vector<uint8_t> rq(m * k / 2), rs(m * g);
    std::vector<float> rts(1);
    ref::quantize_nvfp4(host(fresh.ref, {m, k}), host(rq, DType::kFloat4E2M1, {m, k}),
                        host(rs, DType::kFloat8E4M3, {m, g}), host(rts, {1}));
    expect_same_bytes(q.download<uint8_t>(), rq, k / 2, "values");
    expect_same_bytes(sc.download<uint8_t>(), rs, g, "block scales");
    expect_same_bytes(as_bytes(ts.download<float>()), as_bytes(rts), 4, "tensor scale");
  }
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaStreamDestroy(stream);
}

// ---- Device codecs against the reference codecs, over every fp32 bit pattern.

struct CodecMismatch {
  unsigned long long count;
  uint32_t first;  // smallest mismatching input (bits), 0xFFFFFFFF if none
};

// Thread t encodes the four patterns 4t .. 4t + 3 in one e4m3x4 call (so byte order is checked
// too), and each but NaNs (whose code it leaves open) alone with e4m3_code.
__global__ void e4m3_encode_check(CodecMismatch* out) {
  for (uint64_t t = blockIdx.x * uint64_t(blockDim.x) + threadIdx.x; t < (uint64_t(1) << 30);
       t += uint64_t(gridDim.x) * blockDim.x) {
    const uint32_t u = uint32_t(t) * 4u;
    const uint32_t got =
        cuda::quant::e4m3x4(formats::bits_float(u), formats::bits_float(u + 1),
                            formats::bits_float(u + 2), formats::bits_float(u + 3));
    for (uint32_t k = 0; k < 4; ++k) {
      const float x = formats::bits_float(u + k);
      const uint32_t want = formats::e4m3_from_float(x);
      if (((got >> (8 * k)) & 0xFFu) != want || (x == x && cuda::quant::e4m3_code(x) != want)) {
        atomicAdd(&out->count, 1ull);
        atomicMin(&out->first, u + k);
      }
    }
  }
}

__global__ void e2m1_encode_check(CodecMismatch* out) {
  for (uint64_t t = blockIdx.x * uint64_t(blockDim.x) + threadIdx.x; t < (uint64_t(1) << 32);
       t += uint64_t(gridDim.x) * blockDim.x) {
    const uint32_t u = uint32_t(t);
    if ((u & 0x7FC00000u) == 0x7F800000u && (u & 0x3FFFFFu) != 0) continue;  // signalling NaN
    const float y = formats::bits_float(u);
    if (cuda::quant::e2m1_code_fast(y) != formats::e2m1_from_float(y)) {
      atomicAdd(&out->count, 1ull);
      atomicMin(&out->first, u);
    }
  }
}

// Word t holds the codes t & 0xFF, t >> 8, (t + 1) & 0xFF, (t + 7) >> 8 & 0xFF for t < 2^16: every
// code in every byte position. NaN codes must decode to some NaN.
__global__ void e4m3_decode_check(CodecMismatch* out) {
  const uint32_t t = blockIdx.x * blockDim.x + threadIdx.x;
  if (t >= 0x10000u) return;
  const uint32_t c[4] = {t & 0xFFu, t >> 8, (t + 1) & 0xFFu, ((t + 7) >> 8) & 0xFFu};
  float f[4];
  cuda::quant::e4m3x4_to_float(c[0] | c[1] << 8 | c[2] << 16 | c[3] << 24, f);
  for (int k = 0; k < 4; ++k) {
    const float want = formats::e4m3_to_float(uint8_t(c[k]));
    const bool same = isnan(want) ? isnan(f[k]) : formats::float_bits(f[k]) == formats::float_bits(want);
    if (!same) {
      atomicAdd(&out->count, 1ull);
      atomicMin(&out->first, c[k]);
    }
  }
}

template <class Kernel>
CodecMismatch run_codec_check(Kernel kernel, unsigned blocks) {
  CodecMismatch* d = nullptr;
  MOEFUSE_CUDA_CHECK(cudaMalloc(&d, sizeof(CodecMismatch)));
  const CodecMismatch init{.count = 0, .first = 0xFFFFFFFFu};
  MOEFUSE_CUDA_CHECK(cudaMemcpy(d, &init, sizeof(init), cudaMemcpyHostToDevice));
  kernel<<<blocks, 256>>>(d);
  MOEFUSE_CUDA_CHECK_LAUNCH();
  CodecMismatch h;
  MOEFUSE_CUDA_CHECK(cudaMemcpy(&h, d, sizeof(h), cudaMemcpyDeviceToHost));
  cudaFree(d);
  return h;
}

TEST(QuantGpuCodec, HardwareE4m3EncodeMatchesReferenceOnEveryFloat) {
  MOEFUSE_REQUIRE_HOPPER();
  const CodecMismatch r = run_codec_check(e4m3_encode_check, 132 * 64);
  EXPECT_EQ(r.count, 0u) << "first mismatching input bits 0x" << std::hex << r.first
                         << ", reference code 0x"
                         << int(formats::e4m3_from_float(formats::bits_float(r.first)));
}

TEST(QuantGpuCodec, FastE2m1EncodeMatchesReferenceOnEveryFloat) {
  MOEFUSE_REQUIRE_HOPPER();
  const CodecMismatch r = run_codec_check(e2m1_encode_check, 132 * 64);
  EXPECT_EQ(r.count, 0u) << "first mismatching input bits 0x" << std::hex << r.first
                         << ", reference code 0x"
                         << int(formats::e2m1_from_float(formats::bits_float(r.first)))
                         << ", host fast code 0x"
                         << cuda::quant::e2m1_code_fast(formats::bits_float(r.first));
}

TEST(QuantGpuCodec, HardwareE4m3DecodeMatchesReferenceOnEveryCode) {
  MOEFUSE_REQUIRE_HOPPER();
  const CodecMismatch r = run_codec_check(e4m3_decode_check, 0x10000 / 256);
  EXPECT_EQ(r.count, 0u) << "first mismatching code 0x" << std::hex << r.first;
}

using test::expect_invalid;

// Argument checks run before any CUDA call, so fake device pointers suffice (and no GPU).
TEST(QuantGpuValidation, RejectsBadArguments) {
  alignas(16) static uint8_t fake[4096];
  auto dev = [](DType t, std::initializer_list<int64_t> s, size_t offset = 0) {
    return TensorView::contiguous(fake + offset, t, s, Device::kCuda);
  };
  const auto x = dev(DType::kBFloat16, {2, 160});
  const auto q = dev(DType::kFloat8E4M3, {2, 160});
  expect_invalid([&] { quantize_fp8_blockwise_1x128(dev(DType::kFloat16, {2, 160}), q, dev(DType::kFloat32, {2, 2}), nullptr); }, "x");
  expect_invalid([&] { quantize_fp8_blockwise_1x128(dev(DType::kBFloat16, {2, 152}), dev(DType::kFloat8E4M3, {2, 152}), dev(DType::kFloat32, {2, 2}), nullptr); }, "x");
  expect_invalid([&] { quantize_fp8_blockwise_1x128(dev(DType::kBFloat16, {2, 160}, 2), q, dev(DType::kFloat32, {2, 2}), nullptr); }, "x");
  auto host_x = x;
  host_x.device = Device::kCpu;
  expect_invalid([&] { quantize_fp8_blockwise_1x128(host_x, q, dev(DType::kFloat32, {2, 2}), nullptr); }, "x");
  expect_invalid([&] { quantize_fp8_blockwise_1x128(x, dev(DType::kFloat8E4M3, {2, 144}), dev(DType::kFloat32, {2, 2}), nullptr); }, "q");
  expect_invalid([&] { quantize_fp8_blockwise_1x128(x, q, dev(DType::kFloat32, {2, 1}), nullptr); }, "scales");
  expect_invalid([&] { quantize_mxfp8(x, q, dev(DType::kFloat8E4M3, {2, 5}), nullptr); }, "scales");
  expect_invalid([&] { quantize_mxfp8(x, dev(DType::kFloat8E4M3, {2, 160}, 8), dev(DType::kFloat8E8M0, {2, 5}), nullptr); }, "q");
  const auto fp4 = dev(DType::kFloat4E2M1, {2, 160});
  const auto bs = dev(DType::kFloat8E4M3, {2, 10});
  const auto one = dev(DType::kFloat32, {1}, 64);
  const auto other = dev(DType::kFloat32, {1}, 128);
  expect_invalid([&] { quantize_nvfp4(x, q, bs, one, other, nullptr); }, "q");
  expect_invalid([&] { quantize_nvfp4(x, fp4, dev(DType::kFloat8E4M3, {2, 9}), one, other, nullptr); }, "block_scales");
  expect_invalid([&] { quantize_nvfp4(x, fp4, bs, dev(DType::kFloat32, {2}), other, nullptr); }, "amax");
  expect_invalid([&] { quantize_nvfp4(x, fp4, bs, one, dev(DType::kInt32, {1}), nullptr); }, "tensor_scale");
  expect_invalid([&] { quantize_nvfp4(x, fp4, bs, one, one, nullptr); }, "tensor_scale");
  // The given amax is checked like quantize_nvfp4's (it shares the checks), after x, q, scales.
  auto with_amax = [&](const TensorView& a, const TensorView& t) {
    quantize_nvfp4_with_amax(x, fp4, bs, a, t, nullptr);
  };
  expect_invalid([&] { with_amax(dev(DType::kBFloat16, {1}, 64), other); }, "amax");
  expect_invalid([&] { with_amax(dev(DType::kFloat32, {2}, 64), other); }, "amax");
  expect_invalid([&] { with_amax(dev(DType::kFloat32, {1, 1}, 64), other); }, "amax");
  auto host_amax = one;
  host_amax.device = Device::kCpu;
  expect_invalid([&] { with_amax(host_amax, other); }, "amax");
  expect_invalid([&] { with_amax(one, one); }, "tensor_scale");
  expect_invalid([&] { with_amax(one, dev(DType::kFloat32, {2}, 128)); }, "tensor_scale");
  expect_invalid([&] { quantize_nvfp4_with_amax(x, q, bs, one, other, nullptr); }, "q");
  expect_invalid([&] {
    quantize_nvfp4_with_amax(dev(DType::kBFloat16, {2, 152}), dev(DType::kFloat4E2M1, {2, 152}),
                             dev(DType::kFloat8E4M3, {2, 10}), one, other, nullptr);
  }, "x");
  expect_invalid([&] {
    quantize_nvfp4_with_amax(x, fp4, dev(DType::kFloat8E4M3, {2, 9}), one, other, nullptr);
  }, "block_scales");
  expect_invalid([&] { quantize_fp8_blockwise_128x128(dev(DType::kBFloat16, {1, 1, 2, 160}), q, dev(DType::kFloat32, {1, 2}), nullptr); }, "w");
  expect_invalid([&] { quantize_fp8_blockwise_128x128(x, dev(DType::kFloat8E4M3, {1, 2, 160}), dev(DType::kFloat32, {1, 2}), nullptr); }, "q");
  expect_invalid([&] { quantize_fp8_blockwise_128x128(x, q, dev(DType::kFloat32, {1, 1}), nullptr); }, "scales");
  const auto out = dev(DType::kFloat32, {2, 160});
  expect_invalid([&] { dequantize_fp8_blockwise_1x128(x, dev(DType::kFloat32, {2, 2}), out, nullptr); }, "q");
  expect_invalid([&] { dequantize_fp8_blockwise_1x128(q, dev(DType::kFloat32, {2, 2}), dev(DType::kBFloat16, {2, 160}), nullptr); }, "x");
  expect_invalid([&] { dequantize_mxfp8(q, dev(DType::kFloat8E8M0, {2, 4}), out, nullptr); }, "scales");
  expect_invalid([&] { dequantize_nvfp4(fp4, bs, dev(DType::kFloat32, {2}), out, nullptr); }, "tensor_scale");
  expect_invalid([&] { dequantize_nvfp4(q, bs, one, out, nullptr); }, "q");
  expect_invalid([&] { dequantize_fp8_blockwise_128x128(q, dev(DType::kFloat32, {2, 2}), out, nullptr); }, "scales");
  expect_invalid([&] { dequantize_fp8_blockwise_128x128(q, dev(DType::kFloat32, {1, 2}), dev(DType::kFloat32, {2, 150}), nullptr); }, "w");
}

}  // namespace
}  // namespace moefuse
