// GPU MXFP8 quantise-dequantise (qdq_mxfp8_rows / qdq_mxfp8_cols) against the CPU reference
// (ref::qdq_mxfp8_*) rounded to bf16, bit for bit (NaN as NaN). Fresh random data of two kinds:
// Gaussian values with a spread of magnitudes inside each block, and bf16 bit patterns whose
// exponents span the whole range block by block (subnormal outputs, saturation edges 448 * 2^k,
// NaN, +-Inf, all-zero and all-NaN blocks). Outputs are poisoned first with 0xDEDE, a bf16 of six
// significant bits that no qdq output has (they have at most four, or are subnormal), so an
// element the pass should write and did not fails, and one it must not write (rows outside the
// offsets) must still hold it.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "common/fp8_operands.h"
#include "common/test_util.h"
#include "cuda/check.h"
#include "dispatch_test_util.h"
#include "moefuse/quant.h"
#include "ref/bf16_bits.h"
#include "ref/quant.h"

namespace moefuse {
namespace {

using test::DeviceBuffer;

constexpr int kPoisonByte = 0xDE;
constexpr uint16_t kPoison = 0xDEDE;

// Normal values times 2^U(-20, 20) per 8 elements (a block spans a wide range), bf16 bits.
std::vector<uint16_t> gaussian_spread(int64_t n) {
  const auto v = test::random_normal(n);
  const auto e = test::random_uniform(n / 8 + 1, -20.0f, 20.0f);
  std::vector<uint16_t> b(n);
  for (int64_t i = 0; i < n; ++i)
    b[i] = ref::bf16_bits(std::ldexp(v[i], static_cast<int>(e[i / 8])));
  return b;
}

// bf16 bit patterns block by block (32 elements): a top exponent field anywhere in [0, 254], each
// element's up to 12 below it (0: zero or subnormal), random mantissa and sign. Every 5th block
// gets a special: all zero, all NaN, a NaN, an Inf, or +-448 * 2^k exactly and the next bf16 above.
std::vector<uint16_t> edge_bits(int64_t n) {
  std::uniform_int_distribution<int> top(0, 254), drop(0, 12), mantissa(0, 127), coin(0, 1);
  std::uniform_int_distribution<int> pos(0, 31), k(-140, 118);  // down to subnormal
  auto& g = test::rng();
  std::vector<uint16_t> b(n);
  for (int64_t i0 = 0; i0 < n; i0 += 32) {
    const int t = top(g);
    for (int64_t i = i0; i < std::min(n, i0 + 32); ++i)
      b[i] = uint16_t(coin(g) << 15 | std::max(0, t - drop(g)) << 7 | mantissa(g));
    const int64_t block = i0 / 32, at = i0 + pos(g);
    if (block % 5 != 0 || at >= n) continue;
    switch (block / 5 % 5) {
      case 0: std::fill(b.begin() + i0, b.begin() + std::min(n, i0 + 32), 0); break;
      case 1: std::fill(b.begin() + i0, b.begin() + std::min(n, i0 + 32), 0x7FC0); break;
      case 2: b[at] = coin(g) ? 0x7FC0 : 0xFFC0; break;
      case 3: b[at] = coin(g) ? 0x7F80 : 0xFF80; break;
      default: {  // 448 * 2^k and the next bf16 above it, in the same block
        const uint16_t edge = ref::bf16_bits(std::ldexp(448.0, k(g)));
        b[at] = edge | uint16_t(coin(g) << 15);
        if (const int64_t next = i0 + (at - i0 + 1) % 32; next < n) b[next] = edge + 1;
      }
    }
  }
  return b;
}

std::vector<float> widen(const std::vector<uint16_t>& b) {
  std::vector<float> f(b.size());
  for (size_t i = 0; i < b.size(); ++i) f[i] = ref::bf16_value(b[i]);
  return f;
}

TensorView host_f32(std::vector<float>& v, int64_t m, int64_t n) {
  return TensorView::contiguous(v.data(), DType::kFloat32, {m, n});
}

// The reference's values as bf16 bits where it wrote (rows [lo, hi)), the poison elsewhere.
std::vector<uint16_t> expected_bits(const std::vector<float>& ref, int64_t n, int64_t lo,
                                    int64_t hi, const std::vector<uint16_t>& outside) {
  std::vector<uint16_t> want = outside;
  for (int64_t i = lo * n; i < hi * n; ++i) want[i] = ref::bf16_bits(ref[i]);
  return want;
}

bool is_nan(uint16_t h) { return (h & 0x7F80) == 0x7F80 && (h & 0x7F) != 0; }

// Bit-exact but for NaN payloads; reports the count and the first few mismatches.
void expect_same_bits(const std::vector<uint16_t>& got, const std::vector<uint16_t>& want,
                      int64_t cols, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  int64_t bad = 0;
  for (size_t i = 0; i < got.size(); ++i)
    if (got[i] != want[i] && !(is_nan(got[i]) && is_nan(want[i])) && bad++ < 5)
      ADD_FAILURE() << what << ": element " << i << " (row " << int64_t(i) / cols << ", col "
                    << int64_t(i) % cols << ") gpu 0x" << std::hex << got[i] << " want 0x"
                    << want[i] << std::dec;
  EXPECT_EQ(bad, 0) << what << ": " << bad << " of " << got.size() << " elements differ";
}

using Generator = std::vector<uint16_t> (*)(int64_t);
const Generator kGenerators[] = {gaussian_spread, edge_bits};
const char* const kGeneratorNames[] = {"gaussian spread", "edge bits"};

// The rows pass on x, out of place and in place, against the reference.
void check_rows(int64_t m, int64_t k, Generator gen) {
  const std::vector<uint16_t> bits = gen(m * k);
  std::vector<float> x = widen(bits), ref_out(m * k);
  ref::qdq_mxfp8_rows(host_f32(x, m, k), host_f32(ref_out, m, k));
  const std::vector<uint16_t> want = expected_bits(ref_out, k, 0, m, bits);
  DeviceBuffer<uint16_t> dx(bits), dout(m * k);
  dout.poison(kPoisonByte);
  qdq_mxfp8_rows(dx.view(DType::kBFloat16, {m, k}), dout.view(DType::kBFloat16, {m, k}), nullptr);
  expect_same_bits(dout.download(), want, k, "out");
  expect_same_bits(dx.download(), bits, k, "x (an input)");
  qdq_mxfp8_rows(dx.view(DType::kBFloat16, {m, k}), dx.view(DType::kBFloat16, {m, k}), nullptr);
  expect_same_bits(dx.download(), want, k, "in place");
}

// 4096 x 2048: 1M vectors, more than one grid-stride step of the largest grid.
TEST(QuantQdqGpu, RowsMatchReferenceBits) {
  MOEFUSE_REQUIRE_HOPPER();
  struct Shape { int64_t m, k; };
  for (int g = 0; g < 2; ++g)
    for (Shape s : {Shape{37, 2880}, Shape{1, 32}, Shape{3, 96}, Shape{4096, 2048}}) {
      SCOPED_TRACE(std::string(kGeneratorNames[g]) + ", x [" + std::to_string(s.m) + ", " +
                   std::to_string(s.k) + "], seed " + std::to_string(test::seed()));
      check_rows(s.m, s.k, kGenerators[g]);
    }
}

// The columns pass with `offsets` (empty: absent) on x [m, n], out of place (rows outside the
// offsets keep the poison) and in place (they keep x).
void check_cols(int64_t m, int64_t n, const std::vector<int32_t>& offsets, Generator gen) {
  const std::vector<uint16_t> bits = gen(m * n);
  std::vector<float> x = widen(bits), ref_out(m * n);
  std::vector<int32_t> host_offsets = offsets;
  const auto e = static_cast<int64_t>(offsets.size());
  const TensorView ref_offsets =
      offsets.empty() ? TensorView{}
                      : TensorView::contiguous(host_offsets.data(), DType::kInt32, {e});
  ref::qdq_mxfp8_cols(host_f32(x, m, n), ref_offsets, host_f32(ref_out, m, n));
  const int64_t lo = offsets.empty() ? 0 : offsets.front();
  const int64_t hi = offsets.empty() ? m : offsets.back();
  DeviceBuffer<uint16_t> dx(bits), dout(m * n);
  DeviceBuffer<int32_t> doffsets(offsets);
  const TensorView dev_offsets = offsets.empty() ? TensorView{} : doffsets.view(DType::kInt32, {e});
  dout.poison(kPoisonByte);
  qdq_mxfp8_cols(dx.view(DType::kBFloat16, {m, n}), dev_offsets,
                 dout.view(DType::kBFloat16, {m, n}), nullptr);
  expect_same_bits(dout.download(), expected_bits(ref_out, n, lo, hi,
                                                  std::vector<uint16_t>(m * n, kPoison)),
                   n, "out");
  qdq_mxfp8_cols(dx.view(DType::kBFloat16, {m, n}), dev_offsets,
                 dx.view(DType::kBFloat16, {m, n}), nullptr);
  expect_same_bits(dx.download(), expected_bits(ref_out, n, lo, hi, bits), n, "in place");
}

struct ColsCase {
  std::vector<int> counts;
  int base, spare;  // rows before offsets[0] and past offsets[E]
  int64_t n;
};

// Empty experts (first, inside, last), experts of 1, 7, 45 (a short last block) and 64 rows, all
// rows on one expert, 64 uneven experts; N = 8 (one pair of lanes' worth), 40 (a partial
// 64-column tile), 200 (four tiles, the last partial); and 8192 rows over 16 experts with N = 2048,
// more (block, tile) items than the grid has warps.
TEST(QuantQdqGpu, ColsWithOffsetsMatchReferenceBits) {
  MOEFUSE_REQUIRE_HOPPER();
  const std::vector<ColsCase> cases = {
      {{0, 45, 64, 0, 7, 1, 0}, 3, 5, 40},
      {{0, 45, 64, 0, 7, 1, 0}, 0, 0, 200},
      {{300}, 0, 0, 8},
      {{0, 0, 0, 97}, 31, 2, 200},
      {test::uniform_counts(64, 3000), 0, 17, 72},
      {test::uniform_counts(16, 8000), 100, 92, 2048},
  };
  for (int g = 0; g < 2; ++g)
    for (const ColsCase& c : cases) {
      const std::vector<int32_t> offsets = test::offsets_of(c.counts, c.base);
      const int64_t m = offsets.back() + c.spare;
      SCOPED_TRACE(std::string(kGeneratorNames[g]) + ", x [" + std::to_string(m) + ", " +
                   std::to_string(c.n) + "], " + std::to_string(c.counts.size()) +
                   " experts, seed " + std::to_string(test::seed()));
      check_cols(m, c.n, offsets, kGenerators[g]);
    }
}

// Without offsets: blocks of 32 rows from row 0, as for stacked weights [E * N_rows, K].
TEST(QuantQdqGpu, ColsWithoutOffsetsMatchReferenceBits) {
  MOEFUSE_REQUIRE_HOPPER();
  struct Shape { int64_t m, n; };
  for (int g = 0; g < 2; ++g)
    for (Shape s : {Shape{32, 8}, Shape{96, 40}, Shape{4 * 256, 200}, Shape{2048, 1536}}) {
      SCOPED_TRACE(std::string(kGeneratorNames[g]) + ", x [" + std::to_string(s.m) + ", " +
                   std::to_string(s.n) + "], seed " + std::to_string(test::seed()));
      check_cols(s.m, s.n, {}, kGenerators[g]);
    }
}

// M = 0 (rows, columns with and without offsets), K or N = 0, and offsets whose experts are all
// empty: nothing runs and nothing is written.
TEST(QuantQdqGpu, EmptyInputsWriteNothing) {
  MOEFUSE_REQUIRE_HOPPER();
  DeviceBuffer<uint16_t> x(gaussian_spread(50 * 64)), out(50 * 64);
  DeviceBuffer<int32_t> offsets(std::vector<int32_t>{0, 0, 0}), empty_experts(
      std::vector<int32_t>{20, 20, 20});
  out.poison(kPoisonByte);
  const TensorView none = x.view(DType::kBFloat16, {0, 64});
  qdq_mxfp8_rows(none, out.view(DType::kBFloat16, {0, 64}), nullptr);
  qdq_mxfp8_rows(x.view(DType::kBFloat16, {50, 0}), out.view(DType::kBFloat16, {50, 0}), nullptr);
  qdq_mxfp8_cols(none, TensorView{}, out.view(DType::kBFloat16, {0, 64}), nullptr);
  qdq_mxfp8_cols(none, offsets.view(DType::kInt32, {3}), out.view(DType::kBFloat16, {0, 64}),
                 nullptr);
  qdq_mxfp8_cols(x.view(DType::kBFloat16, {50, 64}), empty_experts.view(DType::kInt32, {3}),
                 out.view(DType::kBFloat16, {50, 64}), nullptr);
  MOEFUSE_CUDA_CHECK(cudaDeviceSynchronize());
  expect_same_bits(out.download(), std::vector<uint16_t>(50 * 64, kPoison), 64, "out");
}

// Offsets outside the contract (negative, decreasing, past M) are the caller's error, but the
// pass must still stay inside out: the rows around it keep their poison.
TEST(QuantQdqGpu, ColsWithBadOffsetsWriteNothingOutsideOut) {
  MOEFUSE_REQUIRE_HOPPER();
  const int64_t m = 64, n = 72, guard = 40;
  DeviceBuffer<uint16_t> x(gaussian_spread(m * n)), padded((m + 2 * guard) * n);
  DeviceBuffer<int32_t> offsets(std::vector<int32_t>{-5, 50, 20, 200});
  padded.poison(kPoisonByte);
  const TensorView out = TensorView::contiguous(padded.data() + guard * n, DType::kBFloat16,
                                                {m, n}, Device::kCuda);
  qdq_mxfp8_cols(x.view(DType::kBFloat16, {m, n}), offsets.view(DType::kInt32, {4}), out,
                 nullptr);
  const std::vector<uint16_t> got = padded.download();
  const std::vector<uint16_t> before(got.begin(), got.begin() + guard * n);
  const std::vector<uint16_t> after(got.end() - guard * n, got.end());
  expect_same_bits(before, std::vector<uint16_t>(guard * n, kPoison), n, "rows before out");
  expect_same_bits(after, std::vector<uint16_t>(guard * n, kPoison), n, "rows after out");
}

// Both passes captured once, replayed on new data and new offsets (same E) in the same buffers:
// the offsets are read on the device when the graph runs.
TEST(QuantQdqGpu, CapturesInACudaGraphAndReplaysOnNewData) {
  MOEFUSE_REQUIRE_HOPPER();
  const int64_t m = 300, n = 96, experts = 5;
  cudaStream_t stream;
  MOEFUSE_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  DeviceBuffer<uint16_t> x(m * n, stream), rows_out(m * n, stream), cols_out(m * n, stream);
  DeviceBuffer<int32_t> offsets(experts + 1, stream);
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  MOEFUSE_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  qdq_mxfp8_rows(x.view(DType::kBFloat16, {m, n}), rows_out.view(DType::kBFloat16, {m, n}),
                 stream);
  qdq_mxfp8_cols(x.view(DType::kBFloat16, {m, n}), offsets.view(DType::kInt32, {experts + 1}),
                 cols_out.view(DType::kBFloat16, {m, n}), stream);
  MOEFUSE_CUDA_CHECK(cudaStreamEndCapture(stream, &graph));
  MOEFUSE_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
  for (int replay = 0; replay < 2; ++replay) {
    SCOPED_TRACE("replay " + std::to_string(replay) + ", seed " + std::to_string(test::seed()));
    const std::vector<uint16_t> bits = gaussian_spread(m * n);
    std::vector<int32_t> o = test::offsets_of(test::uniform_counts(experts, 250), replay * 20);
    x.upload(bits);
    offsets.upload(o);
    rows_out.poison(kPoisonByte);
    cols_out.poison(kPoisonByte);
    MOEFUSE_CUDA_CHECK(cudaGraphLaunch(exec, stream));
    std::vector<float> xf = widen(bits), want_rows(m * n), want_cols(m * n);
    ref::qdq_mxfp8_rows(host_f32(xf, m, n), host_f32(want_rows, m, n));
    ref::qdq_mxfp8_cols(host_f32(xf, m, n),
                        TensorView::contiguous(o.data(), DType::kInt32, {experts + 1}),
                        host_f32(want_cols, m, n));
    const std::vector<uint16_t> poison(m * n, kPoison);
    expect_same_bits(rows_out.download(), expected_bits(want_rows, n, 0, m, poison), n, "rows");
    expect_same_bits(cols_out.download(), expected_bits(want_cols, n, o.front(), o.back(), poison),
                     n, "cols");
  }
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaStreamDestroy(stream);
}

using test::expect_invalid;

// Argument checks run before any CUDA call, so fake device pointers suffice (and no GPU).
TEST(QuantQdqGpuValidation, RejectsBadArguments) {
  alignas(16) static uint8_t fake[1 << 16];
  // Three disjoint regions: x at 0, out at 32 KB, offsets at 48 KB.
  constexpr size_t kOut = 1 << 15, kOffsets = 3 << 14;
  auto dev = [](DType t, std::initializer_list<int64_t> s, size_t offset) {
    return TensorView::contiguous(fake + offset, t, s, Device::kCuda);
  };
  auto bf16 = [&](int64_t m, int64_t n, size_t offset) {
    return dev(DType::kBFloat16, {m, n}, offset);
  };
  const auto x = bf16(64, 64, 0), out = bf16(64, 64, kOut);
  const auto offsets = dev(DType::kInt32, {3}, kOffsets);
  auto rows = [](const TensorView& a, const TensorView& b) { qdq_mxfp8_rows(a, b, nullptr); };
  auto cols = [](const TensorView& a, const TensorView& o, const TensorView& b) {
    qdq_mxfp8_cols(a, o, b, nullptr);
  };
  auto host_x = x;
  host_x.device = Device::kCpu;
  expect_invalid([&] { rows(dev(DType::kFloat32, {64, 64}, 0), out); }, "x");
  expect_invalid([&] { rows(host_x, out); }, "x");
  expect_invalid([&] { rows(bf16(64, 48, 0), bf16(64, 48, kOut)); }, "x");  // K % 32
  expect_invalid([&] { rows(bf16(64, 64, 2), out); }, "x");                 // misaligned
  expect_invalid([&] { rows(x, bf16(64, 32, kOut)); }, "out");
  expect_invalid([&] { rows(x, bf16(64, 64, 128)); }, "out");  // overlaps x, not in place
  expect_invalid([&] { cols(bf16(64, 12, 0), offsets, bf16(64, 12, kOut)); }, "x");  // N % 8
  expect_invalid([&] { cols(bf16(40, 64, 0), TensorView{}, bf16(40, 64, kOut)); }, "x");
  expect_invalid([&] { cols(x, offsets, dev(DType::kFloat32, {64, 64}, kOut)); }, "out");
  expect_invalid([&] { cols(x, offsets, bf16(64, 64, 64)); }, "out");
  expect_invalid([&] { cols(x, dev(DType::kInt32, {1}, kOffsets), out); }, "offsets");  // E = 0
  expect_invalid([&] { cols(x, dev(DType::kInt32, {2, 2}, kOffsets), out); }, "offsets");
  expect_invalid([&] { cols(x, dev(DType::kFloat32, {3}, kOffsets), out); }, "offsets");
  auto host_offsets = offsets;
  host_offsets.device = Device::kCpu;
  expect_invalid([&] { cols(x, host_offsets, out); }, "offsets");
  expect_invalid([&] { cols(x, dev(DType::kInt32, {3}, kOut + 64), out); }, "out");
}

}  // namespace
}  // namespace moefuse
