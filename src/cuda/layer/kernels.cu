#include "cuda/layer/kernels.h"

#include <algorithm>

#include "cuda/check.h"
#include "cuda/gemm/backward/segment_sums.h"

namespace moefuse::layer {
namespace {

constexpr int kThreads = 256;

unsigned blocks_for(int64_t n, int64_t per_block = kThreads, int64_t cap = 4096) {
  return static_cast<unsigned>(std::clamp<int64_t>((n + per_block - 1) / per_block, 1, cap));
}

__global__ void scatter_row_prob_kernel(const float* __restrict__ probs,
                                        const int32_t* __restrict__ row_of,
                                        float* __restrict__ row_prob, int64_t n, int64_t rows) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    const int32_t r = row_of[i];
    if (r >= 0 && r < rows) row_prob[r] = probs[i];
  }
}

__global__ void gather_row_prob_grad_kernel(const float* __restrict__ d_row_prob,
                                            const int32_t* __restrict__ row_of,
                                            float* __restrict__ d_probs, int64_t n,
                                            int64_t rows) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    const int32_t r = row_of[i];
    d_probs[i] = r >= 0 && r < rows ? d_row_prob[r] : 0.0f;
  }
}

// The row count is read on the device: grid-stride over the vectors of its rows only.
__global__ void copy_leading_rows_kernel(const uint4* __restrict__ src, uint4* __restrict__ dst,
                                         const int32_t* __restrict__ rows,
                                         int64_t vectors_per_row, int64_t max_rows) {
  const int64_t n = std::min<int64_t>(*rows, max_rows) * vectors_per_row;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x)
    dst[i] = src[i];
}

__global__ void write_shared_offsets_kernel(int32_t* offsets, int32_t tokens) {
  if (threadIdx.x == 0) {
    offsets[0] = 0;
    offsets[1] = tokens;
  }
}

// One thread per destination entry, consecutive threads along r: coalesced stores, and the
// strided loads touch at most `groups` floats of one row.
__global__ void transpose_scales_kernel(const float* __restrict__ src, float* __restrict__ dst,
                                        int64_t rows, int64_t groups, int64_t dst_cols) {
  const int64_t n = groups * dst_cols;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t g = i / dst_cols, r = i % dst_cols;
    dst[i] = r < rows ? src[r * groups + g] : 1.0f;
  }
}

}  // namespace

void transpose_scales(const float* src, float* dst, int64_t rows, int64_t groups,
                      int64_t dst_cols, cudaStream_t stream) {
  const int64_t n = groups * dst_cols;
  if (n == 0) return;
  transpose_scales_kernel<<<blocks_for(n), kThreads, 0, stream>>>(src, dst, rows, groups,
                                                                  dst_cols);
  MOEFUSE_CUDA_CHECK_LAUNCH();
}

void scatter_row_prob(const float* probs, const int32_t* row_of, float* row_prob,
                      int64_t assignments, int64_t rows, cudaStream_t stream) {
  if (assignments == 0) return;
  scatter_row_prob_kernel<<<blocks_for(assignments), kThreads, 0, stream>>>(
      probs, row_of, row_prob, assignments, rows);
  MOEFUSE_CUDA_CHECK_LAUNCH();
}

void gather_row_prob_grad(const float* d_row_prob, const int32_t* row_of, float* d_probs,
                          int64_t assignments, int64_t rows, cudaStream_t stream) {
  if (assignments == 0) return;
  gather_row_prob_grad_kernel<<<blocks_for(assignments), kThreads, 0, stream>>>(
      d_row_prob, row_of, d_probs, assignments, rows);
  MOEFUSE_CUDA_CHECK_LAUNCH();
}

void copy_leading_rows(const __nv_bfloat16* src, __nv_bfloat16* dst, const int32_t* rows,
                       int64_t max_rows, int64_t width, cudaStream_t stream) {
  const int64_t per_row = width / 8;
  if (max_rows == 0 || per_row == 0) return;
  // Enough CTAs to fill an H100/H200 at full occupancy; the grid strides over the rest.
  copy_leading_rows_kernel<<<blocks_for(max_rows * per_row, kThreads, 132 * 8), kThreads, 0,
                             stream>>>(reinterpret_cast<const uint4*>(src),
                                       reinterpret_cast<uint4*>(dst), rows, per_row, max_rows);
  MOEFUSE_CUDA_CHECK_LAUNCH();
}

void write_shared_offsets(int32_t* offsets, int64_t tokens, cudaStream_t stream) {
  write_shared_offsets_kernel<<<1, 32, 0, stream>>>(offsets, static_cast<int32_t>(tokens));
  MOEFUSE_CUDA_CHECK_LAUNCH();
}

void bias_gradient(const TensorView& a, const TensorView& row_weight, const TensorView& offsets,
                   const TensorView& d, const TensorView& unit_sums, bool accumulate,
                   cudaStream_t stream) {
  gemm::bwd::launch_segment_sums(
      {.a = a.as<const __nv_bfloat16>(),
       .offsets = offsets.as<const int>(),
       .num_experts = static_cast<int>(d.size(0)),
       .m_cap = static_cast<int>(a.size(0)),
       .cols = static_cast<int>(a.size(1)),
       .row_weight = is_absent(row_weight) ? nullptr : row_weight.as<const float>(),
       .sums = d.as<float>(),
       .accumulate = accumulate,
       .unit_sums = unit_sums.as<float>()},
      stream);
}

}  // namespace moefuse::layer
