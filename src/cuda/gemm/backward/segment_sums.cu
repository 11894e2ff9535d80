// launch_segment_sums (segment_sums.h). Block (piece q, expert e) of kWarps warps: lane l owns
// the 8 columns 256·q + 8·l .. + 7 (one 16-byte load a row, a warp's load one row's 512
// contiguous bytes), warp w the expert's rows w, w + kWarps, ... kRowsInFlight at a time. Each
// row's dot is summed by the lane in column order, then over the warp by a fixed butterfly; the
// column sums run along the warp's rows, then over the block's warps in warp order through
// shared memory. dot_with's 8 floats of a lane are loaded once: the block's expert is fixed.
#include "cuda/gemm/backward/segment_sums.h"

#include "cuda/check.h"
#include "cuda/packed_values.cuh"
#include "cuda/router/warp_select.cuh"  // warp_sum

namespace moefuse::gemm::bwd {
namespace {

constexpr int kWarps = 4;
constexpr int kRowsInFlight = 4;
static_assert(kSegmentPiece == 32 * 8, "a piece is a warp of 16-byte vectors");

__global__ void __launch_bounds__(kWarps * 32) segment_sums_kernel(const SegmentSums s) {
  __shared__ float warp_sums[kWarps][kSegmentPiece];
  const int q = blockIdx.x, e = blockIdx.y, warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int col = q * kSegmentPiece + 8 * lane;
  const bool live = col < s.cols;
  const int begin = s.offsets[e], end = min(s.offsets[e + 1], s.m_cap);
  float w[8] = {};
  if (s.dot_with && live) {
    const float4* src = reinterpret_cast<const float4*>(s.dot_with + int64_t{e} * s.cols + col);
    const float4 lo = src[0], hi = src[1];
    w[0] = lo.x, w[1] = lo.y, w[2] = lo.z, w[3] = lo.w;
    w[4] = hi.x, w[5] = hi.y, w[6] = hi.z, w[7] = hi.w;
  }
  float acc[8] = {};
  for (int r0 = begin + warp; r0 < end; r0 += kWarps * kRowsInFlight) {
    uint4 v[kRowsInFlight];
#pragma unroll
    for (int u = 0; u < kRowsInFlight; ++u) {
      const int r = r0 + u * kWarps;
      v[u] = live && r < end
                 ? *reinterpret_cast<const uint4*>(s.a + int64_t{r} * s.cols + col)
                 : make_uint4(0, 0, 0, 0);
    }
#pragma unroll
    for (int u = 0; u < kRowsInFlight; ++u) {
      const int r = r0 + u * kWarps;
      if (r >= end) break;  // warp-uniform
      float f[8];
      cuda::unpack_bf16x8(v[u], f);
      if (s.sums) {
        const float weight = s.row_weight ? s.row_weight[r] : 1.0f;
#pragma unroll
        for (int i = 0; i < 8; ++i) acc[i] += weight * f[i];
      }
      if (s.dot_with) {
        float d = 0.0f;
#pragma unroll
        for (int i = 0; i < 8; ++i) d = fmaf(f[i], w[i], d);
        d = cuda::warp_sum(d);
        if (lane == 0) s.dot_partial[int64_t{q} * s.m_cap + r] = d;
      }
    }
  }
  if (!s.sums) return;
#pragma unroll
  for (int i = 0; i < 8; ++i) warp_sums[warp][8 * lane + i] = acc[i];
  __syncthreads();
  for (int c = threadIdx.x; c < kSegmentPiece; c += kWarps * 32) {
    const int out_col = q * kSegmentPiece + c;
    if (out_col >= s.cols) break;
    float sum = warp_sums[0][c];
    for (int y = 1; y < kWarps; ++y) sum += warp_sums[y][c];
    float* o = s.sums + int64_t{e} * s.cols + out_col;
    *o = s.accumulate ? *o + sum : sum;
  }
}

}  // namespace

void launch_segment_sums(const SegmentSums& s, cudaStream_t stream) {
  if (s.num_experts == 0 || s.cols == 0 || (!s.sums && !s.dot_with)) return;
  const dim3 grid(static_cast<unsigned>(segment_pieces(s.cols)),
                  static_cast<unsigned>(s.num_experts));
  segment_sums_kernel<<<grid, kWarps * 32, 0, stream>>>(s);
  MOEFUSE_CUDA_CHECK_LAUNCH();
}

}  // namespace moefuse::gemm::bwd
