// unpack_fp8_records: a warp a row (rows strided over the grid's warps), lane l decoding the
// 16-code vectors l, l + 32, ... of its row: one 16-byte load of codes, the group's scale (its
// 8 lanes read the same word), the hardware E4M3 decode (exact), 16 products, two 16-byte bf16
// stores.
#include "cuda/quant/fp8_records.h"

#include <cuda_bf16.h>

#include <algorithm>
#include <string>

#include "cuda/check.h"
#include "cuda/device.h"
#include "cuda/packed_values.cuh"
#include "cuda/quant/vec16.cuh"
#include "cuda/sm_count.h"
#include "formats/fp8_row_record.h"
#include "moefuse/error.h"

namespace moefuse::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kCtasPerSm = 4;

struct UnpackParams {
  const uint8_t* records;
  const int32_t* row_offsets;
  __nv_bfloat16* x;
  int first, end;
  int64_t capacity, hidden, record_bytes;
};

__global__ void __launch_bounds__(kThreads) unpack_fp8_records_kernel(const UnpackParams p) {
  const int64_t row0 = __ldg(p.row_offsets + p.first);
  const int64_t row_end = min(int64_t(__ldg(p.row_offsets + p.end)), p.capacity);
  const int lane = threadIdx.x % 32;
  const int64_t warps = int64_t(gridDim.x) * (kThreads / 32);
  const int64_t vecs = p.hidden / quant::kVec;
  for (int64_t r = row0 + blockIdx.x * int64_t(kThreads / 32) + threadIdx.x / 32; r < row_end;
       r += warps) {
    const uint8_t* record = p.records + r * p.record_bytes;
    const float* scales =
        reinterpret_cast<const float*>(record + formats::fp8_record_scales_offset(p.hidden));
    for (int64_t v = lane; v < vecs; v += 32) {
      const uint4 codes = *reinterpret_cast<const uint4*>(record + v * quant::kVec);
      const float scale = scales[v * quant::kVec / formats::kBlockwiseGroup];
      const uint32_t words[4] = {codes.x, codes.y, codes.z, codes.w};
      float out[2][8];
#pragma unroll
      for (int w = 0; w < 4; ++w) {
        float f[4];
        quant::e4m3x4_to_float(words[w], f);
#pragma unroll
        for (int k = 0; k < 4; ++k) out[w / 2][(w % 2) * 4 + k] = f[k] * scale;
      }
      uint4* dst = reinterpret_cast<uint4*>(p.x + r * p.hidden + v * quant::kVec);
      dst[0] = pack_bf16x8(out[0]);
      dst[1] = pack_bf16x8(out[1]);
    }
  }
}

}  // namespace

void unpack_fp8_records(const TensorView& records, const TensorView& row_offsets, int first,
                        int end, const TensorView& x, cudaStream_t stream) {
  expect_tensor(x, "x", DType::kBFloat16, Device::kCuda, {kAnyExtent, kAnyExtent});
  const int64_t capacity = x.size(0), hidden = x.size(1);
  MOEFUSE_EXPECT(hidden % 16 == 0, "x", "rows of a multiple of 16 elements",
                 "shape " + shape_string(x));
  expect_tensor(records, "records", DType::kUInt8, Device::kCuda,
                {capacity, formats::fp8_record_bytes(hidden)});
  expect_aligned(records, "records");
  expect_aligned(x, "x");
  MOEFUSE_EXPECT(first >= 0 && first <= end, "first", "0 <= first <= end",
                 std::to_string(first) + " > " + std::to_string(end));
  expect_tensor(row_offsets, "row_offsets", DType::kInt32, Device::kCuda, {kAnyExtent});
  MOEFUSE_EXPECT(row_offsets.size(0) > end, "row_offsets", "at least end + 1 entries",
                 std::to_string(row_offsets.size(0)));
  expect_launchable(stream);
  const UnpackParams p{.records = records.as<const uint8_t>(),
                       .row_offsets = row_offsets.as<const int32_t>(),
                       .x = x.as<__nv_bfloat16>(),
                       .first = first,
                       .end = end,
                       .capacity = capacity,
                       .hidden = hidden,
                       .record_bytes = formats::fp8_record_bytes(hidden)};
  // The host does not know the rows: enough warps for the whole capacity, capped at a full
  // device (the kernel strides).
  const int64_t blocks = std::min<int64_t>((capacity + kThreads / 32 - 1) / (kThreads / 32),
                                           int64_t{device_sm_count()} * kCtasPerSm);
  if (blocks == 0) return;
  unpack_fp8_records_kernel<<<static_cast<int>(blocks), kThreads, 0, stream>>>(p);
  MOEFUSE_CUDA_CHECK_LAUNCH();
}

}  // namespace moefuse::cuda
