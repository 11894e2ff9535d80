// launch_segment_sums (segment_sums.h), two kernels.
// unit_sums_kernel, block (unit u, piece q) of kWarps warps: the unit's expert and rows come from
// the experts' unit starts (one warp's prefix over the offsets, in shared memory); lane l owns
// the 8 columns 256·q + 8·l .. + 7 (one 16-byte load a row, a warp's load one row's 512
// contiguous bytes), warp w the unit's rows w, w + kWarps, ... kRowsInFlight at a time. Each
// row's dot is summed by the lane in column order, then over the warp by a fixed butterfly; the
// column sums run along the warp's rows, then over the block's warps in warp order through
// shared memory, into unit_sums[u].
// expert_sums_kernel, block (expert e, piece q), a thread a column: e's units' sums in unit
// order.
// One block per expert and piece, as before the units, left a skewed load's longest expert to a
// few blocks each reading all its rows: under Zipf routing gpt-oss-120b's FC2 dgrad stage (whose
// d_b2 pass this is) took 1.48× its uniform time (docs/measurements.md, run 43).
#include "cuda/gemm/backward/segment_sums.h"

#include "cuda/check.h"
#include "cuda/gemm/common/warp_prefix.cuh"
#include "cuda/packed_values.cuh"
#include "cuda/router/warp_select.cuh"  // warp_sum
#include "moefuse/grouped_gemm.h"       // kGroupedGemmMaxExperts

namespace moefuse::gemm::bwd {
namespace {

constexpr int kWarps = 4;
constexpr int kRowsInFlight = 4;
constexpr int kMaxExperts = static_cast<int>(kGroupedGemmMaxExperts);
static_assert(kSegmentPiece == 32 * 8, "a piece is a warp of 16-byte vectors");

__device__ __forceinline__ int expert_rows(const SegmentSums& s, int e) {
  return max(min(s.offsets[e + 1], s.m_cap) - s.offsets[e], 0);
}

// start[e] = the units of experts 0 .. e-1, for the whole block.
__device__ __forceinline__ void unit_starts(const SegmentSums& s, int* start) {
  if (threadIdx.x < 32)
    warp_exclusive_prefix(
        s.num_experts,
        [&](int e) { return static_cast<int>(segment_units(expert_rows(s, e))); }, start);
  __syncthreads();
}

__global__ void __launch_bounds__(kWarps * 32) unit_sums_kernel(const SegmentSums s) {
  __shared__ int start[kMaxExperts + 1];
  __shared__ float warp_sums[kWarps][kSegmentPiece];
  unit_starts(s, start);
  const int u = blockIdx.x;
  if (u >= start[s.num_experts]) return;  // past the last unit: the grid is sized for the worst
  // The unit's expert: the last e with start[e] <= u (it has rows, since start[e + 1] > u).
  int e = 0;
  for (int hi = s.num_experts; hi - e > 1;) {
    const int mid = (e + hi) / 2;
    if (start[mid] <= u) e = mid;
    else hi = mid;
  }
  const int begin = s.offsets[e] + (u - start[e]) * kSegmentRows;
  const int end = min(begin + kSegmentRows, min(s.offsets[e + 1], s.m_cap));
  const int q = blockIdx.y, warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int col = q * kSegmentPiece + 8 * lane;
  const bool live = col < s.cols;
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
    for (int i = 0; i < kRowsInFlight; ++i) {
      const int r = r0 + i * kWarps;
      v[i] = live && r < end
                 ? *reinterpret_cast<const uint4*>(s.a + int64_t{r} * s.cols + col)
                 : make_uint4(0, 0, 0, 0);
    }
#pragma unroll
    for (int i = 0; i < kRowsInFlight; ++i) {
      const int r = r0 + i * kWarps;
      if (r >= end) break;  // warp-uniform
      float f[8];
      cuda::unpack_bf16x8(v[i], f);
      if (s.sums) {
        const float weight = s.row_weight ? s.row_weight[r] : 1.0f;
#pragma unroll
        for (int k = 0; k < 8; ++k) acc[k] += weight * f[k];
      }
      if (s.dot_with) {
        float d = 0.0f;
#pragma unroll
        for (int k = 0; k < 8; ++k) d = fmaf(f[k], w[k], d);
        d = cuda::warp_sum(d);
        if (lane == 0) s.dot_partial[int64_t{q} * s.m_cap + r] = d;
      }
    }
  }
  if (!s.sums) return;
#pragma unroll
  for (int k = 0; k < 8; ++k) warp_sums[warp][8 * lane + k] = acc[k];
  __syncthreads();
  for (int c = threadIdx.x; c < kSegmentPiece; c += kWarps * 32) {
    const int out_col = q * kSegmentPiece + c;
    if (out_col >= s.cols) break;
    float sum = warp_sums[0][c];
    for (int y = 1; y < kWarps; ++y) sum += warp_sums[y][c];
    s.unit_sums[int64_t{u} * s.cols + out_col] = sum;
  }
}

__global__ void __launch_bounds__(kSegmentPiece) expert_sums_kernel(const SegmentSums s) {
  __shared__ int start[kMaxExperts + 1];
  unit_starts(s, start);
  const int e = blockIdx.x, col = blockIdx.y * kSegmentPiece + threadIdx.x;
  const int first = start[e], last = start[e + 1];
  if (col >= s.cols || (first == last && s.accumulate)) return;  // no rows: the old sums stay
  float sum = 0.0f;
  for (int u = first; u < last; ++u) sum += s.unit_sums[int64_t{u} * s.cols + col];
  float* o = s.sums + int64_t{e} * s.cols + col;
  *o = s.accumulate ? *o + sum : sum;
}

}  // namespace

void launch_segment_sums(const SegmentSums& s, cudaStream_t stream) {
  if (s.num_experts == 0 || s.cols == 0 || (!s.sums && !s.dot_with)) return;
  const auto pieces = static_cast<unsigned>(segment_pieces(s.cols));
  const auto units = static_cast<unsigned>(segment_units_cap(s.m_cap, s.num_experts));
  unit_sums_kernel<<<dim3(units, pieces), kWarps * 32, 0, stream>>>(s);
  MOEFUSE_CUDA_CHECK_LAUNCH();
  if (!s.sums) return;
  expert_sums_kernel<<<dim3(static_cast<unsigned>(s.num_experts), pieces), kSegmentPiece, 0,
                       stream>>>(s);
  MOEFUSE_CUDA_CHECK_LAUNCH();
}

}  // namespace moefuse::gemm::bwd
