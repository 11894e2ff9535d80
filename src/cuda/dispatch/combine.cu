// combine (and permute_backward, its unweighted case; both also with an added term) and
// combine_backward. One warp per token, gather-based: the warp reads its k rows and writes its
// own output row, so no output element is touched by two warps and no atomics decide anything.
// Sums run in j order with fp32 accumulation, the added term last, then one rounding; the
// d_probs dot products reduce over lanes with a fixed butterfly.
#include <cuda_runtime.h>

#include "cuda/check.h"
#include "cuda/device.h"
#include "cuda/dispatch/dispatch_args.h"
#include "cuda/dispatch/rows.cuh"
#include "cuda/router/checks.h"
#include "moefuse/dispatch.h"

namespace moefuse {
namespace cuda {
namespace {

constexpr int kVecsPerLane = 2;  // per chunk: 2 vectors × up to 4 rows in flight per lane
constexpr int kRowsInFlight = 4;
constexpr unsigned kFull = 0xffffffffu;

struct CombineParams {
  const uint4* ys;
  const float* probs;  // nullptr: weight 1
  const int32_t* row_of;
  const uint4* add;    // nullptr: none; else [T, H], y itself or apart from it
  uint4* y;
  int tokens, top_k, rows, vecs;
  int32_t* health;
};

__global__ void __launch_bounds__(kRowWarps * 32) combine_kernel(CombineParams p) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int t = blockIdx.x * kRowWarps + warp;
  if (t >= p.tokens) return;
  const int k = p.top_k;
  const int my_row = load_row(p.row_of, t, k, lane, p.rows, p.health);
  const float my_p = p.probs && lane < k ? p.probs[static_cast<int64_t>(t) * k + lane] : 1.0f;
  for (int c0 = 0; c0 < p.vecs; c0 += 32 * kVecsPerLane) {
    float acc[kVecsPerLane][8] = {};
    for (int j0 = 0; j0 < k; j0 += kRowsInFlight) {
      uint4 v[kRowsInFlight][kVecsPerLane];
      int row[kRowsInFlight];
      float w[kRowsInFlight];
#pragma unroll
      for (int u = 0; u < kRowsInFlight; ++u) {
        const int j = j0 + u;  // < 32: k <= 16
        row[u] = __shfl_sync(kFull, my_row, j);
        w[u] = __shfl_sync(kFull, my_p, j);
        if (j >= k) row[u] = -1;
#pragma unroll
        for (int q = 0; q < kVecsPerLane; ++q) {
          const int c = c0 + q * 32 + lane;
          v[u][q] = row[u] >= 0 && c < p.vecs
                        ? __ldcs(p.ys + static_cast<int64_t>(row[u]) * p.vecs + c)
                        : make_uint4(0, 0, 0, 0);
        }
      }
#pragma unroll
      for (int u = 0; u < kRowsInFlight; ++u) {
        if (row[u] < 0) continue;
#pragma unroll
        for (int q = 0; q < kVecsPerLane; ++q) {
          float f[8];
          unpack_bf16x8(v[u][q], f);
#pragma unroll
          for (int i = 0; i < 8; ++i) acc[q][i] = fmaf(w[u], f[i], acc[q][i]);
        }
      }
    }
    uint4* dst = p.y + static_cast<int64_t>(t) * p.vecs;
#pragma unroll
    for (int q = 0; q < kVecsPerLane; ++q) {
      const int c = c0 + q * 32 + lane;
      if (c >= p.vecs) continue;
      if (p.add) {  // read before this lane writes the same piece when add is y
        float a[8];
        unpack_bf16x8(__ldcs(p.add + static_cast<int64_t>(t) * p.vecs + c), a);
#pragma unroll
        for (int i = 0; i < 8; ++i) acc[q][i] += a[i];
      }
      dst[c] = pack_bf16x8(acc[q]);
    }
  }
}

struct CombineBackwardParams {
  const uint4* dy;
  const uint4* ys;     // nullptr when unweighted
  const float* probs;  // nullptr: weight 1, no d_probs
  const int32_t* row_of;
  const int32_t* token_of_row;
  uint4* dys;
  float* d_probs;
  int tokens, top_k, rows, vecs;
  unsigned token_blocks;
  int32_t* health;
};

__global__ void __launch_bounds__(kRowWarps * 32)
    combine_backward_kernel(CombineBackwardParams p) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (blockIdx.x >= p.token_blocks) {
    const int first = ((blockIdx.x - p.token_blocks) * kRowWarps + warp) * 32;
    zero_unassigned_rows(p.token_of_row, p.dys, p.rows, p.vecs, p.tokens, first, lane, p.health);
    return;
  }
  const int t = blockIdx.x * kRowWarps + warp;
  if (t >= p.tokens) return;
  const int k = p.top_k;
  const bool weighted = p.probs != nullptr;
  const int my_row = load_row(p.row_of, t, k, lane, p.rows, p.health);
  const float my_p = weighted && lane < k ? p.probs[static_cast<int64_t>(t) * k + lane] : 1.0f;
  float dot[kDispatchMaxTopK] = {};
  const uint4* g_row = p.dy + static_cast<int64_t>(t) * p.vecs;
  for (int c0 = 0; c0 < p.vecs; c0 += 32 * kVecsPerLane) {
    float g[kVecsPerLane][8];
#pragma unroll
    for (int q = 0; q < kVecsPerLane; ++q) {
      const int c = c0 + q * 32 + lane;
      unpack_bf16x8(c < p.vecs ? __ldg(g_row + c) : make_uint4(0, 0, 0, 0), g[q]);
    }
#pragma unroll
    for (int j0 = 0; j0 < kDispatchMaxTopK; j0 += kRowsInFlight) {
      if (j0 >= k) break;
      uint4 v[kRowsInFlight][kVecsPerLane];
      int row[kRowsInFlight];
      float w[kRowsInFlight];
#pragma unroll
      for (int u = 0; u < kRowsInFlight; ++u) {
        row[u] = __shfl_sync(kFull, my_row, j0 + u);
        w[u] = __shfl_sync(kFull, my_p, j0 + u);
        if (j0 + u >= k) row[u] = -1;
#pragma unroll
        for (int q = 0; q < kVecsPerLane; ++q) {
          const int c = c0 + q * 32 + lane;
          v[u][q] = weighted && row[u] >= 0 && c < p.vecs
                        ? __ldcs(p.ys + static_cast<int64_t>(row[u]) * p.vecs + c)
                        : make_uint4(0, 0, 0, 0);
        }
      }
#pragma unroll
      for (int u = 0; u < kRowsInFlight; ++u) {
        if (row[u] < 0) continue;
        uint4* dst = p.dys + static_cast<int64_t>(row[u]) * p.vecs;
#pragma unroll
        for (int q = 0; q < kVecsPerLane; ++q) {
          const int c = c0 + q * 32 + lane;
          float out[8], f[8];
          unpack_bf16x8(v[u][q], f);
#pragma unroll
          for (int i = 0; i < 8; ++i) {
            out[i] = w[u] * g[q][i];
            dot[j0 + u] = fmaf(g[q][i], f[i], dot[j0 + u]);
          }
          if (c < p.vecs) dst[c] = pack_bf16x8(out);
        }
      }
    }
  }
  if (!weighted) return;
#pragma unroll
  for (int j = 0; j < kDispatchMaxTopK; ++j) {
    if (j >= k) break;
    float d = dot[j];
#pragma unroll
    for (int s = 16; s > 0; s /= 2) d += __shfl_xor_sync(kFull, d, s);
    if (lane == 0) p.d_probs[static_cast<int64_t>(t) * k + j] = d;
  }
}

// add: an empty view, or the added term (checked by check_added_term).
void launch_combine(const TensorView& ys, const TensorView& probs, const TensorView& row_of,
                    const TensorView& add, const TensorView& y, int32_t* health,
                    const RowsShape& s, cudaStream_t stream) {
  if (s.tokens == 0) return;
  const CombineParams p{
      .ys = ys.as<const uint4>(),
      .probs = is_absent(probs) ? nullptr : probs.as<const float>(),
      .row_of = row_of.as<const int32_t>(),
      .add = is_absent(add) ? nullptr : add.as<const uint4>(),
      .y = y.as<uint4>(),
      .tokens = static_cast<int>(s.tokens),
      .top_k = static_cast<int>(s.top_k),
      .rows = static_cast<int>(s.rows),
      .vecs = static_cast<int>(s.hidden / 8),
      .health = health,
  };
  const unsigned blocks = static_cast<unsigned>((s.tokens + kRowWarps - 1) / kRowWarps);
  combine_kernel<<<blocks, kRowWarps * 32, 0, stream>>>(p);
  MOEFUSE_CUDA_CHECK_LAUNCH();
}

}  // namespace
}  // namespace cuda

void combine(const TensorView& ys, const TensorView& probs, const TensorView& row_of,
             const TensorView& y, const TensorView& health, cudaStream_t stream) {
  combine_add(ys, probs, row_of, TensorView{}, y, health, stream);
}

void combine_add(const TensorView& ys, const TensorView& probs, const TensorView& row_of,
                 const TensorView& add, const TensorView& y, const TensorView& health,
                 cudaStream_t stream) {
  const cuda::RowsShape s = cuda::check_combine(ys, probs, row_of, y);
  if (!is_absent(add)) cuda::check_added_term(add, s, y, "y");
  int32_t* flag = cuda::expect_health(health);
  cuda::expect_launchable(stream);
  cuda::launch_combine(ys, probs, row_of, add, y, flag, s, stream);
}

void permute_backward(const TensorView& dxs, const TensorView& row_of, const TensorView& dx,
                      const TensorView& health, cudaStream_t stream) {
  permute_backward_add(dxs, row_of, TensorView{}, dx, health, stream);
}

void permute_backward_add(const TensorView& dxs, const TensorView& row_of, const TensorView& add,
                          const TensorView& dx, const TensorView& health, cudaStream_t stream) {
  const cuda::RowsShape s = cuda::check_permute_backward(dxs, row_of, dx);
  if (!is_absent(add)) cuda::check_added_term(add, s, dx, "dx");
  int32_t* flag = cuda::expect_health(health);
  cuda::expect_launchable(stream);
  cuda::launch_combine(dxs, TensorView{}, row_of, add, dx, flag, s, stream);
}

void combine_backward(const TensorView& dy, const TensorView& ys, const TensorView& probs,
                      const TensorView& row_of, const TensorView& token_of_row,
                      const TensorView& dys, const TensorView& d_probs, const TensorView& health,
                      cudaStream_t stream) {
  const cuda::RowsShape s =
      cuda::check_combine_backward(dy, ys, probs, row_of, token_of_row, dys, d_probs);
  int32_t* flag = cuda::expect_health(health);
  cuda::expect_launchable(stream);
  const unsigned token_blocks =
      static_cast<unsigned>((s.tokens + cuda::kRowWarps - 1) / cuda::kRowWarps);
  const unsigned blocks = token_blocks + cuda::zero_blocks(s.rows);
  if (blocks == 0) return;
  const bool weighted = !is_absent(probs);
  const cuda::CombineBackwardParams p{
      .dy = dy.as<const uint4>(),
      .ys = weighted ? ys.as<const uint4>() : nullptr,
      .probs = weighted ? probs.as<const float>() : nullptr,
      .row_of = row_of.as<const int32_t>(),
      .token_of_row = token_of_row.as<const int32_t>(),
      .dys = dys.as<uint4>(),
      .d_probs = weighted ? d_probs.as<float>() : nullptr,
      .tokens = static_cast<int>(s.tokens),
      .top_k = static_cast<int>(s.top_k),
      .rows = static_cast<int>(s.rows),
      .vecs = static_cast<int>(s.hidden / 8),
      .token_blocks = token_blocks,
      .health = flag,
  };
  cuda::combine_backward_kernel<<<blocks, cuda::kRowWarps * 32, 0, stream>>>(p);
  MOEFUSE_CUDA_CHECK_LAUNCH();
}

}  // namespace moefuse
