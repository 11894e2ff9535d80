// transpose_fp8_blockwise_weights (moefuse/grouped_gemm_fp8_dgrad.h): w [E, N, K] e4m3 → wt
// [E, K, N], and the 128×128 block scales [E, N/128, K/128] → [E, K/128, N/128]. A byte copy:
// the blocks of wᵀ are the transposed blocks of w, so codes and scales move unchanged.
//
// Mapping: CTA (x, y, e) owns the 64 × 64 byte tile of expert e at n0 = 64 y, k0 = 64 x. Its 256
// threads load the tile as 16-byte row pieces (one each: 64 rows × 4 pieces), store it into
// shared memory, then each builds a 16-byte piece of a wt row (k, n0 + 16 q .. + 15) from a
// column of the shared tile. N, K % 16 == 0, so a piece is entirely in or out. The CTAs with
// x = y = 0 also copy their expert's scales.
#include <cstdint>

#include "cuda/check.h"
#include "cuda/device.h"
#include "cuda/gemm/tile_scheduler.h"
#include "moefuse/grouped_gemm_fp8_dgrad.h"

namespace moefuse::gemm::fp8 {
namespace {

inline constexpr int kTile = 64;
inline constexpr int kThreads = kTile * kTile / 16;
// A row pitch of 65 words' worth of bytes would not keep 16-byte alignment; 80 bytes (5 × 16)
// keeps it and spreads a column's bytes over the banks.
inline constexpr int kPitch = kTile + 16;

struct TransposeParams {
  const uint8_t* w;
  const float* w_scales;
  uint8_t* wt;
  float* wt_scales;
  int n, k, n_groups, k_groups;
};

__global__ void __launch_bounds__(kThreads) weight_transpose_kernel(const TransposeParams p) {
  __shared__ alignas(16) uint8_t tile[kTile][kPitch];
  const int64_t e = blockIdx.z;
  const int n0 = blockIdx.y * kTile, k0 = blockIdx.x * kTile;
  const uint8_t* w = p.w + e * p.n * int64_t{p.k};
  uint8_t* wt = p.wt + e * p.n * int64_t{p.k};
  {
    const int r = threadIdx.x / 4, c = 16 * (threadIdx.x % 4);
    if (n0 + r < p.n && k0 + c < p.k)
      *reinterpret_cast<uint4*>(&tile[r][c]) =
          __ldg(reinterpret_cast<const uint4*>(w + int64_t{n0 + r} * p.k + k0 + c));
  }
  __syncthreads();
  {
    const int kk = threadIdx.x / 4, q = 16 * (threadIdx.x % 4);
    if (k0 + kk < p.k && n0 + q < p.n) {
      alignas(16) uint8_t piece[16];
#pragma unroll
      for (int i = 0; i < 16; ++i) piece[i] = tile[q + i][kk];
      *reinterpret_cast<uint4*>(wt + int64_t{k0 + kk} * p.n + n0 + q) =
          *reinterpret_cast<const uint4*>(piece);
    }
  }
  if (blockIdx.x == 0 && blockIdx.y == 0) {
    const int64_t blocks = int64_t{p.n_groups} * p.k_groups;
    const float* s = p.w_scales + e * blocks;
    float* st = p.wt_scales + e * blocks;
    for (int64_t i = threadIdx.x; i < blocks; i += kThreads) {
      const int64_t ni = i / p.k_groups, kj = i % p.k_groups;
      st[kj * p.n_groups + ni] = s[i];
    }
  }
}

}  // namespace
}  // namespace moefuse::gemm::fp8

namespace moefuse {

void transpose_fp8_blockwise_weights(const TensorView& w, const TensorView& w_scales,
                                     const TensorView& wt, const TensorView& wt_scales,
                                     cudaStream_t stream) {
  validate_transpose_fp8_blockwise_weights(w, w_scales, wt, wt_scales, Device::kCuda);
  cuda::expect_launchable(stream);
  using namespace gemm::fp8;
  const int n = static_cast<int>(w.size(1)), k = static_cast<int>(w.size(2));
  const TransposeParams p{.w = w.as<const uint8_t>(),
                          .w_scales = w_scales.as<const float>(),
                          .wt = wt.as<uint8_t>(),
                          .wt_scales = wt_scales.as<float>(),
                          .n = n,
                          .k = k,
                          .n_groups = static_cast<int>(fp8_scale_groups(n)),
                          .k_groups = static_cast<int>(fp8_scale_groups(k))};
  const dim3 grid(gemm::ceil_div(k, kTile), gemm::ceil_div(n, kTile),
                  static_cast<unsigned>(w.size(0)));
  weight_transpose_kernel<<<grid, kThreads, 0, stream>>>(p);
  MOEFUSE_CUDA_CHECK_LAUNCH();
}

}  // namespace moefuse
