// moefuse-bench quant: the GPU quantise / dequantise kernels (moefuse/quant.h), each timed as the
// median of many launches, with achieved TB/s (bytes read + written once) and the ratio to a
// cudaMemcpyAsync device-to-device copy moving the same number of bytes, measured in the same run.
//
//   moefuse-bench quant [--m 16384] [--k 7168] [--dtype bf16|fp32] [--experts 8] [--n 2048]
//                       [--topk 2] [--routing uniform|zipf|balanced] [--iters 50] [--warmup 10]
//                       [--json FILE]
// Activations are x [m, k]; weights (128x128 blocks) are w [experts, n, k]. The MXFP8
// quantise-dequantise passes (bf16 only) run on x along k (rows), on x down its rows in 32-row
// blocks per expert, the experts' rows from routing m / topk tokens (columns: the rows past
// offsets[E] are not touched, nor counted), and on w as [experts * n, k] (columns, blocks from
// row 0; when n % 32 == 0). The input holds
// pseudo-random values over a wide range (fill_inputs), not a constant, so every group gets its
// own scale and codes of every magnitude; the dequantisers read what the quantisers wrote.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "bench/mode.h"
#include "bench/report.h"
#include "bench/routing.h"
#include "bench/timing.h"
#include "cuda/check.h"
#include "cuda/device.h"
#include "moefuse/error.h"
#include "moefuse/grouped_gemm_fp8_wgrad.h"
#include "moefuse/quant.h"

namespace moefuse::bench {
namespace {

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

struct DeviceBuffer {
  void* ptr = nullptr;
  explicit DeviceBuffer(size_t bytes) {
    MOEFUSE_CUDA_CHECK(cudaMalloc(&ptr, bytes ? bytes : 1));
    // Non-zero, finite input data: a bf16/fp32 pattern of moderate values (0x3C3C...).
    MOEFUSE_CUDA_CHECK(cudaMemset(ptr, 0x3C, bytes ? bytes : 1));
  }
  ~DeviceBuffer() { cudaFree(ptr); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
};

// x[i] = a hashed value in (-1, 1) times 2^(e - 8), e in [0, 16) chosen per 16 elements (a group
// of every recipe sees one magnitude, as real activations roughly do).
__device__ uint32_t hash32(uint64_t i) {
  uint64_t h = i * 0x9E3779B97F4A7C15ull;
  h ^= h >> 29;
  h *= 0xBF58476D1CE4E5B9ull;
  return uint32_t(h >> 32);
}

template <class T>
__global__ void fill_inputs(T* x, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    const float unit = float(int32_t(hash32(i))) * 0x1p-31f;
    x[i] = T(ldexpf(unit, int(hash32(i / 16 + (int64_t(1) << 40)) % 16) - 8));
  }
}

struct Case {
  std::string name;
  std::string shape;
  double bytes;  // read + written, once each
  std::function<void(cudaStream_t)> launch;
};

int run_quant(Args& args) {
  const int64_t m = args.get_int("m", 16384, 1, 1 << 20);
  const int64_t k = args.get_int("k", 7168, 16, 1 << 20);
  const int64_t experts = args.get_int("experts", 8, 1, 1024);
  const int64_t n = args.get_int("n", 2048, 1, 1 << 20);
  const int64_t topk = args.get_int("topk", 2, 1, 64);
  const std::string routing_arg = args.get("routing", "uniform");
  const std::string dtype_arg = args.get("dtype", "bf16");
  const int iters = static_cast<int>(args.get_int("iters", 50, 1, 100000));
  const int warmup = static_cast<int>(args.get_int("warmup", 10, 0, 100000));
  const std::string json = args.get("json", "");
  args.finish();
  MOEFUSE_EXPECT(dtype_arg == "bf16" || dtype_arg == "fp32", "--dtype", "bf16 or fp32",
                 "'" + dtype_arg + "'");
  MOEFUSE_EXPECT(k % 16 == 0, "--k", "a multiple of 16", std::to_string(k));
  MOEFUSE_EXPECT(topk <= experts, "--topk", "at most --experts (" + std::to_string(experts) + ")",
                 std::to_string(topk));
  const RoutingDistribution routing = parse_routing(routing_arg);
  if (gpu_missing("quant")) return 0;
  const DType in = dtype_arg == "bf16" ? DType::kBFloat16 : DType::kFloat32;
  const double in_bytes = dtype_arg == "bf16" ? 2 : 4;
  const int64_t wn = experts * n;
  const int64_t big = std::max(m, wn) * k;
  // scales: the largest layout, NVFP4's [*, K/16] e4m3 or fp32 1x128, or the MXFP8 column one.
  const int64_t scale_bytes = std::max(ceil_div(big, 16) * 4, mxfp8_col_blocks(m, experts) * k);
  DeviceBuffer x(big * 4), q(big), scales(scale_bytes), amax(4), ts(4), out(big * 4),
      copy_src(big * 8), copy_dst(big * 8);
  auto dev = [](const DeviceBuffer& b, DType t, std::initializer_list<int64_t> s) {
    return TensorView::contiguous(b.ptr, t, s, Device::kCuda);
  };
  if (in == DType::kBFloat16)
    fill_inputs<<<1024, 256>>>(static_cast<__nv_bfloat16*>(x.ptr), big);
  else
    fill_inputs<<<1024, 256>>>(static_cast<float*>(x.ptr), big);
  MOEFUSE_CUDA_CHECK_LAUNCH();
  const std::string act = "[" + std::to_string(m) + ", " + std::to_string(k) + "]";
  const std::string wsh = "[" + std::to_string(experts) + ", " + std::to_string(n) + ", " +
                          std::to_string(k) + "]";
  const double mk = double(m) * k, nk = double(wn) * k;
  const int64_t g128 = ceil_div(k, 128), g32 = ceil_div(k, 32), g16 = ceil_div(k, 16);
  const int64_t bn = ceil_div(n, 128);

  // The wgrad's column-wise grouped layout: x's rows as `experts` equal experts (the last takes
  // the remainder), each quantised in 128-row groups and stored transposed.
  std::vector<int32_t> offsets(experts + 1);
  for (int64_t e = 0; e <= experts; ++e)
    offsets[e] = static_cast<int32_t>(e == experts ? m : e * (m / experts));
  const int64_t groups = fp8_colwise_groups(m, experts);
  DeviceBuffer offsets_dev(offsets.size() * 4), xt(k * 128 * groups), xt_scales(groups * k * 4);
  MOEFUSE_CUDA_CHECK(cudaMemcpy(offsets_dev.ptr, offsets.data(), offsets.size() * 4,
                                cudaMemcpyHostToDevice));

  std::vector<Case> cases = {
      {"quantize 1x128 fp8", act, mk * (in_bytes + 1) + m * g128 * 4.0,
       [&](cudaStream_t s) {
         quantize_fp8_blockwise_1x128(dev(x, in, {m, k}), dev(q, DType::kFloat8E4M3, {m, k}),
                                      dev(scales, DType::kFloat32, {m, g128}), s);
       }},
      {"quantize mxfp8", act, mk * (in_bytes + 1) + m * g32 * 1.0,
       [&](cudaStream_t s) {
         quantize_mxfp8(dev(x, in, {m, k}), dev(q, DType::kFloat8E4M3, {m, k}),
                        dev(scales, DType::kFloat8E8M0, {m, g32}), s);
       }},
      {"quantize nvfp4 (amax + quantise)", act, mk * (in_bytes + 0.5) + m * g16 * 1.0,
       [&](cudaStream_t s) {
         quantize_nvfp4(dev(x, in, {m, k}), dev(q, DType::kFloat4E2M1, {m, k}),
                        dev(scales, DType::kFloat8E4M3, {m, g16}), dev(amax, DType::kFloat32, {1}),
                        dev(ts, DType::kFloat32, {1}), s);
       }},
      // One pass over x: the amax the row above leaves in `amax` (the true one) is the input.
      {"quantize nvfp4 (given amax)", act, mk * (in_bytes + 0.5) + m * g16 * 1.0,
       [&](cudaStream_t s) {
         quantize_nvfp4_with_amax(dev(x, in, {m, k}), dev(q, DType::kFloat4E2M1, {m, k}),
                                  dev(scales, DType::kFloat8E4M3, {m, g16}),
                                  dev(amax, DType::kFloat32, {1}), dev(ts, DType::kFloat32, {1}),
                                  s);
       }},
      {"quantize 128x128 fp8", wsh, nk * (in_bytes + 1) + experts * bn * g128 * 4.0,
       [&](cudaStream_t s) {
         quantize_fp8_blockwise_128x128(dev(x, in, {experts, n, k}),
                                        dev(q, DType::kFloat8E4M3, {experts, n, k}),
                                        dev(scales, DType::kFloat32, {experts, bn, g128}), s);
       }},
      {"dequantize 1x128 fp8", act, mk * (1 + 4) + m * g128 * 4.0,
       [&](cudaStream_t s) {
         dequantize_fp8_blockwise_1x128(dev(q, DType::kFloat8E4M3, {m, k}),
                                        dev(scales, DType::kFloat32, {m, g128}),
                                        dev(out, DType::kFloat32, {m, k}), s);
       }},
      {"dequantize mxfp8", act, mk * (1 + 4) + m * g32 * 1.0,
       [&](cudaStream_t s) {
         dequantize_mxfp8(dev(q, DType::kFloat8E4M3, {m, k}), dev(scales, DType::kFloat8E8M0, {m, g32}),
                          dev(out, DType::kFloat32, {m, k}), s);
       }},
      {"dequantize nvfp4", act, mk * (0.5 + 4) + m * g16 * 1.0,
       [&](cudaStream_t s) {
         dequantize_nvfp4(dev(q, DType::kFloat4E2M1, {m, k}), dev(scales, DType::kFloat8E4M3, {m, g16}),
                          dev(ts, DType::kFloat32, {1}), dev(out, DType::kFloat32, {m, k}), s);
       }},
      {"dequantize 128x128 fp8", wsh, nk * (1 + 4) + experts * bn * g128 * 4.0,
       [&](cudaStream_t s) {
         dequantize_fp8_blockwise_128x128(dev(q, DType::kFloat8E4M3, {experts, n, k}),
                                          dev(scales, DType::kFloat32, {experts, bn, g128}),
                                          dev(out, DType::kFloat32, {experts, n, k}), s);
       }},
  };

  if (in == DType::kBFloat16) {  // the wgrad's operands are bf16
    cases.push_back({"quantize 128x1 fp8, grouped, transposed (wgrad operand)", act,
                     mk * (in_bytes + 1) + groups * k * 4.0, [&](cudaStream_t s) {
                       quantize_fp8_colwise_grouped(
                           dev(x, in, {m, k}), dev(offsets_dev, DType::kInt32, {experts + 1}),
                           dev(xt, DType::kFloat8E4M3, {k, 128 * groups}),
                           dev(xt_scales, DType::kFloat32, {groups, k}), s);
                     }});
    // Both copies the FP8 backward takes of d_pre (the FC1 dgrad's, dW1's) from one read.
    cases.push_back({"quantize 1x128 + 128x1 fp8, one read (rows and wgrad operand)", act,
                     mk * (in_bytes + 2) + groups * k * 4.0 + m * g128 * 4.0,
                     [&](cudaStream_t s) {
                       quantize_fp8_rowcol_grouped(
                           dev(x, in, {m, k}), dev(offsets_dev, DType::kInt32, {experts + 1}),
                           dev(xt, DType::kFloat8E4M3, {k, 128 * groups}),
                           dev(xt_scales, DType::kFloat32, {groups, k}),
                           dev(q, DType::kFloat8E4M3, {m, k}),
                           dev(scales, DType::kFloat32, {g128, fp8_scale_rows(m)}), s);
                     }});
  }

  // The passes over routed rows, bf16 only: the column-wise quantiser's gather form and the MXFP8
  // quantise-dequantise passes (rows with k % 32 == 0).
  DeviceBuffer routed_offsets(in == DType::kBFloat16 ? (experts + 1) * 4 : 0);
  DeviceBuffer token_of_row(in == DType::kBFloat16 ? m * 4 : 0);
  if (in == DType::kBFloat16) {
    const SyntheticRouting routed = draw_routing(m / topk, experts, topk, routing, /*seed=*/1234);
    const int64_t routed_rows = routed.offsets.back();
    MOEFUSE_CUDA_CHECK(cudaMemcpy(routed_offsets.ptr, routed.offsets.data(),
                                  routed.offsets.size() * 4, cudaMemcpyHostToDevice));
    MOEFUSE_CUDA_CHECK(cudaMemcpy(token_of_row.ptr, routed.token_of_row.data(),
                                  routed.token_of_row.size() * 4, cudaMemcpyHostToDevice));
    // dW1's x operand in the FP8 layer: the routed rows read from the m / topk tokens' rows
    // through token_of_row (each token's row k times), quantised column-wise. Its groups are
    // the routed rows' (fewer than m's where topk does not divide m), within xt's room.
    const int64_t routed_groups = fp8_colwise_groups(routed_rows, experts);
    cases.push_back({"quantize 128x1 fp8, grouped, transposed, rows gathered from tokens", act,
                     double(routed_rows) * k * (in_bytes + 1) + routed_groups * k * 4.0,
                     [&, routed_rows, routed_groups](cudaStream_t s) {
                       quantize_fp8_colwise_grouped_gather(
                           dev(x, in, {m / topk, k}),
                           dev(token_of_row, DType::kInt32, {routed_rows}),
                           dev(routed_offsets, DType::kInt32, {experts + 1}),
                           dev(xt, DType::kFloat8E4M3, {k, 128 * routed_groups}),
                           dev(xt_scales, DType::kFloat32, {routed_groups, k}), s);
                     }});
    const TensorView xb = dev(x, in, {m, k}), ob = dev(out, in, {m, k});
    if (k % 32 == 0)
      cases.push_back({"qdq mxfp8 rows", act, mk * 4.0,
                       [=](cudaStream_t s) { qdq_mxfp8_rows(xb, ob, s); }});
    const TensorView offs = dev(routed_offsets, DType::kInt32, {experts + 1});
    cases.push_back({"qdq mxfp8 cols, " + std::to_string(routed_rows) + " routed rows", act,
                     double(routed_rows) * k * 4.0,
                     [=](cudaStream_t s) { qdq_mxfp8_cols(xb, offs, ob, s); }});
    // The MXFP8 wgrad's operand: codes in place, e8m0 scales per expert-aligned 32-row block.
    const int64_t col_blocks = mxfp8_col_blocks(m, experts);
    const TensorView qc = dev(q, DType::kFloat8E4M3, {m, k});
    const TensorView sc = dev(scales, DType::kFloat8E8M0, {col_blocks, k});
    cases.push_back({"quantize mxfp8 cols, " + std::to_string(routed_rows) + " routed rows", act,
                     double(routed_rows) * k * 3.0 + double(col_blocks) * k,
                     [=](cudaStream_t s) { quantize_mxfp8_cols(xb, offs, qc, sc, s); }});
    if (wn % 32 == 0) {
      const TensorView xw = dev(x, in, {wn, k}), ow = dev(out, in, {wn, k});
      cases.push_back({"qdq mxfp8 cols, stacked weights", "[" + std::to_string(wn) + ", " +
                       std::to_string(k) + "]", nk * 4.0,
                       [=](cudaStream_t s) { qdq_mxfp8_cols(xw, TensorView{}, ow, s); }});
    }
  }

  cudaStream_t stream;
  MOEFUSE_CUDA_CHECK(cudaStreamCreate(&stream));
  Report report("quant kernels (" + dtype_arg + " input), vs cudaMemcpyAsync D2D of the same bytes",
                {"kernel", "shape", "median us", "TB/s", "copy TB/s", "ratio to copy"});
  for (const Case& c : cases) {
    progress("quant: " + c.name);
    const Timing t = time_on_stream(c.launch, stream, warmup, iters);
    // A copy of bytes/2 reads and writes bytes/2 each: the same traffic as the kernel.
    const size_t copy_bytes = static_cast<size_t>(c.bytes / 2);
    const Timing ct = time_on_stream(
        [&](cudaStream_t s) {
          MOEFUSE_CUDA_CHECK(cudaMemcpyAsync(copy_dst.ptr, copy_src.ptr, copy_bytes,
                                             cudaMemcpyDeviceToDevice, s));
        },
        stream, warmup, iters);
    const double tbs = c.bytes / (t.median_ms * 1e-3) / 1e12;
    const double copy_tbs = 2.0 * copy_bytes / (ct.median_ms * 1e-3) / 1e12;
    report.add_row({c.name, c.shape, t.median_ms * 1e3, tbs, copy_tbs, tbs / copy_tbs});
  }
  progress_done();
  MOEFUSE_CUDA_CHECK(cudaStreamSynchronize(stream));
  MOEFUSE_CUDA_CHECK(cudaStreamDestroy(stream));
  report.set_meta("iterations", static_cast<long long>(iters));
  report.set_meta("routing", routing_arg + ", top-" + std::to_string(topk));
  report.print();
  if (!json.empty()) write_json_file(json, args.command(), {&report});
  return 0;
}

}  // namespace

MOEFUSE_BENCH_MODE(quant, "quant",
                   "GPU quantise/dequantise kernels (blockwise FP8, MXFP8, NVFP4, MXFP8 qdq): "
                   "TB/s vs copy",
                   "[--m 16384] [--k 7168] [--experts 8] [--n 2048] [--dtype bf16|fp32] "
                   "[--topk 2] [--routing uniform|zipf|balanced] [--warmup 10] [--iters 50] "
                   "[--json FILE]",
                   run_quant);

}  // namespace moefuse::bench
