// The MXFP8 backward grouped GEMMs (moefuse/grouped_gemm_mxfp8_backward.h) and the GPU column
// quantiser (quantize_mxfp8_cols) on the GPU.
//
// quantize_mxfp8_cols: codes and scales bit for bit against ref::quantize_mxfp8_cols on
// bf16-valued wide-range data with NaN and Inf, with offsets (empty experts, short blocks,
// offsets[0] > 0, spare rows) and without; rows and scale rows it must not write keep their
// poison.
//
// The GEMMs: operands from fresh random fp32 data (a random power-of-two magnitude per 8
// elements, so the scales differ block to block) quantised by the reference quantisers
// (bit-identical to the GPU's: rows by quantize_mxfp8 with the scales transposed K-major,
// weights and wgrad operands by quantize_mxfp8_cols), and dequantised exactly on the host
// (ref::dequantize_*, then bf16: an E4M3 value times a power of two is a bf16 value). Checks:
// - each output bit for bit equal to the BF16 call's on the host-dequantised bf16 operands in the
//   same run (the header's contract), outputs of both poisoned first;
// - the workspace's bf16 copies equal the host's dequantised values (every row for a rows
//   operand, all of a weight);
// - the plain dgrad's fp32 D against the fp64 product of the dequantised operands: relative norm
//   1e-4 (fp32 accumulation only, as the BF16 backward test's fp32 outputs).
// The wgrad's workspace is poisoned with NaN, so a converted row outside the experts, or a read
// of an unconverted one, would poison the result.
#include <gtest/gtest.h>

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "common/fp8_operands.h"
#include "common/test_util.h"
#include "dispatch_test_util.h"
#include "moefuse/grouped_gemm_fp8.h"
#include "moefuse/grouped_gemm_mxfp8_backward.h"
#include "moefuse/quant.h"
#include "ref/quant.h"

namespace moefuse {
namespace {

using test::DeviceBuffer;
using test::host;

#define CHECK_CUDA(call) ASSERT_EQ((call), cudaSuccess) << #call

constexpr DType kCodes = DType::kFloat8E4M3, kScales = DType::kFloat8E8M0;

// Normal values times 2^round(U(-5, 5)) per run of 8 elements.
std::vector<float> spread(int64_t n, float stddev = 1.0f) {
  std::vector<float> v = test::random_normal(n, stddev);
  const std::vector<float> e = test::random_uniform(n / 8 + 1, -5.0f, 5.0f);
  for (int64_t i = 0; i < n; ++i) v[i] = std::ldexp(v[i], static_cast<int>(std::lround(e[i / 8])));
  return v;
}

// bf16 bits of fp32 values that bf16 holds exactly (dequantised MXFP8 values), NaN kept.
std::vector<uint16_t> bf16_bits(const std::vector<float>& v) {
  std::vector<uint16_t> out(v.size());
  for (size_t i = 0; i < v.size(); ++i)
    out[i] = std::isnan(v[i]) ? uint16_t{0x7FC0} : test::float_to_bf16(v[i]);
  return out;
}

// An MXFP8 operand on the host in the GPU's layout, and its exact bf16 dequantisation.
struct HostOperand {
  std::vector<uint8_t> codes, scales;
  std::vector<uint16_t> deq;
};

// x [m, k] quantised along rows: scales K-major [k/32, mxfp8_scale_rows(m)].
HostOperand quantise_rows(int64_t m, int64_t k) {
  std::vector<float> x = spread(m * k), back(m * k);
  HostOperand o{std::vector<uint8_t>(m * k), {}, {}};
  std::vector<uint8_t> row_major(m * (k / 32));
  ref::quantize_mxfp8(host(x.data(), DType::kFloat32, {m, k}), host(o.codes.data(), kCodes, {m, k}),
                      host(row_major.data(), kScales, {m, k / 32}));
  ref::dequantize_mxfp8(host(o.codes.data(), kCodes, {m, k}),
                        host(row_major.data(), kScales, {m, k / 32}),
                        host(back.data(), DType::kFloat32, {m, k}));
  o.scales.resize(k / 32 * mxfp8_scale_rows(m));
  transpose_mxfp8_activation_scales(host(row_major.data(), kScales, {m, k / 32}),
                                    host(o.scales.data(), kScales, {k / 32, mxfp8_scale_rows(m)}));
  o.deq = bf16_bits(back);
  return o;
}

// x [m, n] quantised down its columns in 32-row blocks, restarting at each expert's first row
// (offsets) or from row 0 (no offsets). Rows outside the experts: codes 0, deq NaN (never read).
HostOperand quantise_cols(int64_t m, int64_t n, std::vector<int32_t>* offsets,
                          float stddev = 1.0f) {
  const int64_t e = offsets ? static_cast<int64_t>(offsets->size()) - 1 : 0;
  const int64_t blocks = mxfp8_col_blocks(m, e);
  std::vector<float> x = spread(m * n, stddev);
  std::vector<float> back(m * n, std::nanf(""));
  HostOperand o{std::vector<uint8_t>(m * n), std::vector<uint8_t>(blocks * n), {}};
  const TensorView ov = offsets ? host(offsets->data(), DType::kInt32, {e + 1}) : TensorView{};
  ref::quantize_mxfp8_cols(host(x.data(), DType::kFloat32, {m, n}), ov,
                           host(o.codes.data(), kCodes, {m, n}),
                           host(o.scales.data(), kScales, {blocks, n}));
  ref::dequantize_mxfp8_cols(host(o.codes.data(), kCodes, {m, n}), ov,
                             host(o.scales.data(), kScales, {blocks, n}),
                             host(back.data(), DType::kFloat32, {m, n}));
  o.deq = bf16_bits(back);
  return o;
}

// The device copy of a host operand: codes, scales, and the dequantised bf16 for the BF16 twin.
struct DeviceOperand {
  DeviceBuffer<uint8_t> codes, scales;
  DeviceBuffer<uint16_t> deq;
  explicit DeviceOperand(const HostOperand& h) : codes(h.codes), scales(h.scales), deq(h.deq) {}
};

// First index where two byte images differ, or -1.
int64_t first_difference(const std::vector<uint8_t>& a, const std::vector<uint8_t>& b) {
  if (a.size() != b.size()) return 0;
  for (size_t i = 0; i < a.size(); ++i)
    if (a[i] != b[i]) return static_cast<int64_t>(i);
  return -1;
}

#define EXPECT_SAME_BYTES(got, want, what)                                       \
  do {                                                                            \
    const int64_t at_ = first_difference((got), (want));                          \
    EXPECT_EQ(at_, -1) << what << ": first difference at byte " << at_;           \
  } while (0)

// The workspace's bf16 copy at byte `offset` against `want` on the elements [lo, hi).
void expect_copy(const std::vector<uint8_t>& ws, size_t offset, const std::vector<uint16_t>& want,
                 int64_t lo, int64_t hi, const std::string& what) {
  for (int64_t i = lo; i < hi; ++i) {
    uint16_t got;
    std::memcpy(&got, &ws[offset + 2 * i], 2);
    ASSERT_EQ(got, want[i]) << what << " element " << i;
  }
}

size_t aligned256(size_t bytes) { return (bytes + 255) / 256 * 256; }

TEST(QuantMxfp8ColsGpu, MatchesTheReferenceBitForBit) {
  MOEFUSE_REQUIRE_HOPPER();
  struct Case {
    int64_t m, n;
    std::vector<int32_t> offsets;  // empty: no offsets
  };
  const Case cases[] = {
      {160, 24, {5, 5, 75, 75, 107, 108, 150, 150}},  // empty experts, short blocks, spare rows
      {96, 264, {}},                                    // blocks from row 0, a partial tile
      {1, 8, {0, 1}},                                   // one row
  };
  for (Case c : cases) {
    SCOPED_TRACE("m " + std::to_string(c.m) + ", n " + std::to_string(c.n));
    const int64_t e = c.offsets.empty() ? 0 : static_cast<int64_t>(c.offsets.size()) - 1;
    const int64_t blocks = mxfp8_col_blocks(c.m, e);
    std::vector<float> x = spread(c.m * c.n, 1.0f);
    if (c.m * c.n > 200) {
      x[17] = std::nanf("");
      x[101] = INFINITY;
      x[150] = -INFINITY;
    }
    const std::vector<uint16_t> xb = bf16_bits(x);
    for (size_t i = 0; i < x.size(); ++i) x[i] = test::bf16_to_float(xb[i]);
    std::vector<uint8_t> q(c.m * c.n, 0xA5), s(blocks * c.n, 0xA5);
    const TensorView ov_host =
        e ? host(c.offsets.data(), DType::kInt32, {e + 1}) : TensorView{};
    ref::quantize_mxfp8_cols(host(x.data(), DType::kFloat32, {c.m, c.n}), ov_host,
                             host(q.data(), kCodes, {c.m, c.n}),
                             host(s.data(), kScales, {blocks, c.n}));
    DeviceBuffer<uint16_t> xd(xb);
    DeviceBuffer<int32_t> od(c.offsets);
    DeviceBuffer<uint8_t> qd(q.size()), sd(s.size());
    qd.poison(0xA5);
    sd.poison(0xA5);
    quantize_mxfp8_cols(xd.view(DType::kBFloat16, {c.m, c.n}),
                        e ? od.view(DType::kInt32, {e + 1}) : TensorView{},
                        qd.view(kCodes, {c.m, c.n}), sd.view(kScales, {blocks, c.n}), nullptr);
    CHECK_CUDA(cudaDeviceSynchronize());
    EXPECT_SAME_BYTES(qd.download(), q, "codes");
    EXPECT_SAME_BYTES(sd.download(), s, "scales");
  }
}

// Expert row counts (empty experts, one past a block, short ones) and M_cap with spare rows.
const std::vector<int> kCounts = {70, 0, 33, 1, 128, 0, 45};
constexpr int kBase = 3, kSpare = 5;

TEST(GroupedGemmMxfp8Backward, DgradIsTheBf16DgradOnTheDequantisedOperands) {
  MOEFUSE_REQUIRE_HOPPER();
  const int64_t e = static_cast<int64_t>(kCounts.size()), k = 192, n = 136;
  std::vector<int32_t> offsets = test::offsets_of(kCounts, kBase);
  const int64_t m_cap = offsets.back() + kSpare;
  const HostOperand a = quantise_rows(m_cap, k);
  const HostOperand b = quantise_cols(e * k, n, nullptr, 1.0f / std::sqrt(float(k)));
  DeviceOperand da(a), db(b);
  DeviceBuffer<int32_t> off(offsets);
  DeviceBuffer<float> d(m_cap * n), d_bf16(m_cap * n);
  const Mxfp8Operand ma{da.codes.view(kCodes, {m_cap, k}),
                        da.scales.view(kScales, {k / 32, mxfp8_scale_rows(m_cap)})};
  const Mxfp8Operand mb{db.codes.view(kCodes, {e, k, n}), db.scales.view(kScales, {e, k / 32, n})};
  DeviceBuffer<uint8_t> ws(mxfp8_backward_workspace_size(ma, mb));
  d.poison();
  d_bf16.poison();
  ws.poison();
  GroupedGemmDgradArgs args{.offsets = off.view(DType::kInt32, {e + 1}),
                            .d = d.view(DType::kFloat32, {m_cap, n})};
  grouped_gemm_dgrad_mxfp8(ma, mb, args, {ws.data(), ws.size()}, nullptr);
  GroupedGemmDgradArgs twin = args;
  twin.a = da.deq.view(DType::kBFloat16, {m_cap, k});
  twin.b = db.deq.view(DType::kBFloat16, {e, k, n});
  twin.d = d_bf16.view(DType::kFloat32, {m_cap, n});
  grouped_gemm_dgrad(twin, nullptr);
  CHECK_CUDA(cudaDeviceSynchronize());

  const std::vector<float> got = d.download();
  std::vector<uint8_t> got_bytes(got.size() * 4), twin_bytes(got.size() * 4);
  const std::vector<float> want = d_bf16.download();
  std::memcpy(got_bytes.data(), got.data(), got_bytes.size());
  std::memcpy(twin_bytes.data(), want.data(), twin_bytes.size());
  EXPECT_SAME_BYTES(got_bytes, twin_bytes, "d");
  const std::vector<uint8_t> w = ws.download();
  expect_copy(w, 0, a.deq, 0, m_cap * k, "deq(a)");
  expect_copy(w, aligned256(m_cap * k * 2), b.deq, 0, e * k * n, "deq(b)");

  // fp64 reference on the dequantised operands, rows of the experts.
  std::vector<double> ref;
  std::vector<float> mine;
  for (int64_t ex = 0; ex < e; ++ex)
    for (int64_t r = offsets[ex]; r < offsets[ex + 1]; ++r)
      for (int64_t j = 0; j < n; ++j) {
        double sum = 0;
        for (int64_t t = 0; t < k; ++t)
          sum += double(test::bf16_to_float(a.deq[r * k + t])) *
                 test::bf16_to_float(b.deq[(ex * k + t) * n + j]);
        ref.push_back(sum);
        mine.push_back(got[r * n + j]);
      }
  EXPECT_LT(test::rel_norm_error(mine, ref), 1e-4);
  for (int64_t r = 0; r < m_cap; ++r)
    if (r < offsets.front() || r >= offsets.back())
      ASSERT_TRUE(std::isnan(got[r * n])) << "row " << r << " outside the experts was written";
}

TEST(GroupedGemmMxfp8Backward, Fc2DgradIsTheBf16CallOnTheDequantisedOperands) {
  MOEFUSE_REQUIRE_HOPPER();
  const int64_t e = static_cast<int64_t>(kCounts.size()), h = 160, f = 96;
  std::vector<int32_t> offsets = test::offsets_of(kCounts, kBase);
  const int64_t m_cap = offsets.back() + kSpare;
  const HostOperand dys = quantise_rows(m_cap, h);
  const HostOperand w2 = quantise_cols(e * h, f, nullptr, 1.0f / std::sqrt(float(h)));
  DeviceOperand ddys(dys), dw2(w2);
  DeviceBuffer<int32_t> off(offsets);
  DeviceBuffer<uint16_t> pre(bf16_bits(test::random_normal(m_cap * 2 * f)));
  DeviceBuffer<float> row_scale(test::random_uniform(m_cap, 0.1f, 1.0f));
  DeviceBuffer<float> b2(test::random_normal(e * h));
  const int64_t dp_blocks = fc2_dgrad_dp_blocks(f);
  // Outputs: [0] the MXFP8 call's, [1] the BF16 twin's.
  DeviceBuffer<uint16_t> d_pre[2] = {DeviceBuffer<uint16_t>(m_cap * 2 * f),
                                     DeviceBuffer<uint16_t>(m_cap * 2 * f)};
  DeviceBuffer<uint16_t> act[2] = {DeviceBuffer<uint16_t>(m_cap * f),
                                   DeviceBuffer<uint16_t>(m_cap * f)};
  DeviceBuffer<float> dp[2] = {DeviceBuffer<float>(m_cap), DeviceBuffer<float>(m_cap)};
  DeviceBuffer<float> partial(m_cap * dp_blocks);
  const Mxfp8Operand mdys{ddys.codes.view(kCodes, {m_cap, h}),
                          ddys.scales.view(kScales, {h / 32, mxfp8_scale_rows(m_cap)})};
  const Mxfp8Operand mw2{dw2.codes.view(kCodes, {e, h, f}),
                         dw2.scales.view(kScales, {e, h / 32, f})};
  DeviceBuffer<uint8_t> ws(mxfp8_backward_workspace_size(mdys, mw2));
  ws.poison();
  for (int i = 0; i < 2; ++i) {
    d_pre[i].poison();
    act[i].poison();
    dp[i].poison();
  }
  auto args = [&](int i) {
    return Fc2DgradArgs{.offsets = off.view(DType::kInt32, {e + 1}),
                        .pre = pre.view(DType::kBFloat16, {m_cap, 2 * f}),
                        .d_pre = d_pre[i].view(DType::kBFloat16, {m_cap, 2 * f}),
                        .activation = Activation::kClampedSwiGLU,
                        .row_scale = row_scale.view(DType::kFloat32, {m_cap}),
                        .scaled_act = act[i].view(DType::kBFloat16, {m_cap, f}),
                        .d_row_scale = dp[i].view(DType::kFloat32, {m_cap}),
                        .b2 = b2.view(DType::kFloat32, {e, h})};
  };
  const Fc2DgradScratch scratch{.dp_partial = partial.view(DType::kFloat32, {m_cap, dp_blocks})};
  grouped_gemm_fc2_dgrad_mxfp8(mdys, mw2, args(0), scratch, {ws.data(), ws.size()}, nullptr);
  Fc2DgradArgs twin = args(1);
  twin.dys = ddys.deq.view(DType::kBFloat16, {m_cap, h});
  twin.w2 = dw2.deq.view(DType::kBFloat16, {e, h, f});
  grouped_gemm_fc2_dgrad(twin, scratch, nullptr);
  CHECK_CUDA(cudaDeviceSynchronize());

  auto bytes = [](const auto& buffer) {
    const auto v = buffer.download();
    std::vector<uint8_t> out(v.size() * sizeof(v[0]));
    std::memcpy(out.data(), v.data(), out.size());
    return out;
  };
  EXPECT_SAME_BYTES(bytes(d_pre[0]), bytes(d_pre[1]), "d_pre");
  EXPECT_SAME_BYTES(bytes(act[0]), bytes(act[1]), "scaled_act");
  EXPECT_SAME_BYTES(bytes(dp[0]), bytes(dp[1]), "d_row_scale");
  const std::vector<uint16_t> dp_rows = d_pre[0].download();
  int64_t finite = 0;  // the experts' rows were written
  for (int64_t r = offsets.front(); r < offsets.back(); ++r)
    finite += std::isfinite(test::bf16_to_float(dp_rows[r * 2 * f]));
  EXPECT_EQ(finite, offsets.back() - offsets.front());
  const std::vector<uint8_t> w = ws.download();
  expect_copy(w, 0, dys.deq, 0, m_cap * h, "deq(dys)");
  expect_copy(w, aligned256(m_cap * h * 2), w2.deq, 0, e * h * f, "deq(w2)");
}

// dW [E, M_out, N_out] from grouped a and b: bf16 d, or fp32 d accumulating into random values
// (an expert with no rows keeps them bit for bit in both calls).
void run_wgrad(const std::vector<int>& counts, bool accumulate) {
  const int64_t e = static_cast<int64_t>(counts.size()), m_out = 72, n_out = 136;
  std::vector<int32_t> offsets = test::offsets_of(counts, kBase);
  const int64_t m_cap = offsets.back() + kSpare;
  const HostOperand a = quantise_cols(m_cap, m_out, &offsets);
  const HostOperand b = quantise_cols(m_cap, n_out, &offsets);
  DeviceOperand da(a), db(b);
  DeviceBuffer<int32_t> off(offsets);
  const DType d_type = accumulate ? DType::kFloat32 : DType::kBFloat16;
  const size_t d_bytes = e * m_out * n_out * (accumulate ? 4 : 2);
  const std::vector<float> start = test::random_normal(e * m_out * n_out);
  std::vector<uint8_t> start_bytes(d_bytes, 0xFF);
  if (accumulate) std::memcpy(start_bytes.data(), start.data(), d_bytes);
  DeviceBuffer<uint8_t> d[2] = {DeviceBuffer<uint8_t>(start_bytes),
                                DeviceBuffer<uint8_t>(start_bytes)};
  const Mxfp8Operand ma{da.codes.view(kCodes, {m_cap, m_out}),
                        da.scales.view(kScales, {mxfp8_col_blocks(m_cap, e), m_out})};
  const Mxfp8Operand mb{db.codes.view(kCodes, {m_cap, n_out}),
                        db.scales.view(kScales, {mxfp8_col_blocks(m_cap, e), n_out})};
  DeviceBuffer<uint8_t> ws(mxfp8_backward_workspace_size(ma, mb));
  ws.poison();  // NaN: a row read outside the experts would show in D
  auto args = [&](int i) {
    return GroupedGemmWgradArgs{.offsets = off.view(DType::kInt32, {e + 1}),
                                .d = d[i].view(d_type, {e, m_out, n_out}),
                                .accumulate = accumulate};
  };
  grouped_gemm_wgrad_mxfp8(ma, mb, args(0), {ws.data(), ws.size()}, nullptr);
  GroupedGemmWgradArgs twin = args(1);
  twin.a = da.deq.view(DType::kBFloat16, {m_cap, m_out});
  twin.b = db.deq.view(DType::kBFloat16, {m_cap, n_out});
  grouped_gemm_wgrad(twin, nullptr);
  CHECK_CUDA(cudaDeviceSynchronize());
  const std::vector<uint8_t> got = d[0].download();
  EXPECT_SAME_BYTES(got, d[1].download(), "d");
  const size_t plane = m_out * n_out * (accumulate ? 4 : 2);
  for (int64_t ex = 0; ex < e; ++ex)
    if (counts[ex] == 0 && accumulate)
      EXPECT_EQ(std::memcmp(got.data() + ex * plane, start_bytes.data() + ex * plane, plane), 0)
          << "expert " << ex << " has no rows: its accumulator must stay as it was";
  const size_t width = accumulate ? 4 : 2;
  for (size_t i = 0; i < got.size(); i += width) {
    float v = 0.0f;
    if (accumulate) {
      std::memcpy(&v, &got[i], 4);
    } else {
      uint16_t h16;
      std::memcpy(&h16, &got[i], 2);
      v = test::bf16_to_float(h16);
    }
    ASSERT_TRUE(std::isfinite(v)) << "d element " << i / width << " is not finite";
  }
  const std::vector<uint8_t> w = ws.download();
  const size_t second = aligned256(m_cap * m_out * 2);
  expect_copy(w, 0, a.deq, offsets.front() * m_out, offsets.back() * m_out, "deq(a)");
  expect_copy(w, second, b.deq, offsets.front() * n_out, offsets.back() * n_out, "deq(b)");
}

TEST(GroupedGemmMxfp8Backward, WgradIsTheBf16WgradOnTheDequantisedOperands) {
  MOEFUSE_REQUIRE_HOPPER();
  run_wgrad(kCounts, false);
  run_wgrad(kCounts, true);
}

TEST(GroupedGemmMxfp8Backward, WgradEdges) {
  MOEFUSE_REQUIRE_HOPPER();
  run_wgrad({0, 0, 300, 0}, true);  // all rows on one expert
  run_wgrad({0, 0, 0}, true);       // no rows at all: every accumulator untouched
  run_wgrad({1, 0, 2}, false);      // T = 1-like: one- and two-row experts
}

}  // namespace
}  // namespace moefuse
