// The walk of the MXFP8 column passes (qdq_mxfp8_cols, quantize_mxfp8_cols and the emulated
// GEMMs' column dequantise): a matrix [M, N] cut into blocks of 32 consecutive rows of one column,
// each pass an operation on one (block, 4 columns) item.
//
// A warp takes one 32-row block x 128 columns: lane l the columns 4l .. 4l + 3 ("quad" l of the
// tile) in each of the block's 32 rows, so each warp instruction reads or writes a contiguous
// piece of one row. Work items are (block, 128-column tile), tiles fastest, so that a CTA's warps
// touch adjacent pieces of the same rows; warps grid-stride over them.
//
// With offsets the blocks restart at each expert's first row: block g is expert e's block
// g - block_start[e], block_start[e] = sum over e' < e of ceil(m_e' / 32). That count exists only
// on the device: each CTA copies the offsets to shared memory, takes the block starts with the
// tile scheduler's prefix (warp_tile_starts, 32-row tiles) and finds a block's expert with
// find_expert. The host sizes the grid from the bound ceil(M / 32) + E; the warps loop over the
// count the device found. Without offsets block g is rows 32g .. 32g + 31 (M % 32 == 0).
// Either way g is also the row of the block's scales in the column layout [blocks, N].
#pragma once

#include <algorithm>
#include <cstdint>

#include "cuda/check.h"
#include "cuda/gemm/device_scheduler.cuh"
#include "cuda/sm_count.h"
#include "formats/recipes.h"
#include "moefuse/grouped_gemm.h"
#include "moefuse/tensor.h"

namespace moefuse::cuda::quant {

inline constexpr int kColumnThreads = 256;
inline constexpr int kColumnWarps = kColumnThreads / 32;
inline constexpr int kColumnBlock = formats::kMxBlock;
inline constexpr int kTileQuads = 32;  // a warp's groups of 4 columns, one a lane
// A lane of the quantising passes holds 32 x 8 bytes (96 registers): two CTAs an SM keep 128 KB
// of loads in flight an SM (at three ptxas spills).
inline constexpr int kColumnCtasPerSm = 2;

struct ColumnWalk {
  const int* offsets;  // [num_experts + 1], or null: blocks of 32 rows from row 0
  int rows, quads, num_experts, col_tiles;
};

// The rows [first, first + rows) of one block. Offsets that break the contract (negative, past M,
// decreasing) are clipped to [0, M), so a pass stays inside its tensors.
struct BlockRows {
  int first, rows;
};

// expert_tiles(rows, column_block_shape()) = ceil(rows / 32): the blocks of an expert. A
// function, so that device code can pass it by reference without a device-side variable.
__device__ constexpr gemm::TileShape column_block_shape() {
  return gemm::TileShape{.block_m = kColumnBlock, .block_n = 1, .group_m = 1, .n_blocks = 1};
}

__device__ __forceinline__ BlockRows block_rows(int g, const ColumnWalk& w, const int* offsets,
                                                const int* block_start) {
  if (!w.offsets) return {kColumnBlock * g, kColumnBlock};
  const int e = gemm::find_expert(block_start, w.num_experts, g);
  const int first = offsets[e] + kColumnBlock * (g - block_start[e]);
  const int rows = min(kColumnBlock, min(offsets[e + 1], w.rows) - first);
  return first < 0 || rows <= 0 ? BlockRows{0, 0} : BlockRows{first, rows};
}

// op(rows, g, quad) for every block g and quad of the matrix (quad may be past N / 4 in the last
// tile: the op skips it).
template <class Op>
__global__ void __launch_bounds__(kColumnThreads, kColumnCtasPerSm)
    column_blocks_kernel(const ColumnWalk w, const Op op) {
  __shared__ int offsets[kGroupedGemmMaxExperts + 1];
  __shared__ int block_start[kGroupedGemmMaxExperts + 1];
  int blocks = w.rows / kColumnBlock;
  if (w.offsets) {
    for (int e = threadIdx.x; e <= w.num_experts; e += kColumnThreads) offsets[e] = w.offsets[e];
    __syncthreads();
    if (threadIdx.x < 32)
      gemm::warp_tile_starts(offsets, w.num_experts, column_block_shape(), block_start);
    __syncthreads();
    blocks = block_start[w.num_experts];
  }
  // Warp v takes items v, v + warps, ... (item = g * col_tiles + tile), stepped without a
  // division per item.
  const int warps = gridDim.x * kColumnWarps, warp = blockIdx.x * kColumnWarps + threadIdx.x / 32;
  const int step_g = warps / w.col_tiles, step_tile = warps % w.col_tiles;
  for (int g = warp / w.col_tiles, tile = warp % w.col_tiles; g < blocks;) {
    op(block_rows(g, w, offsets, block_start), g,
       tile * kTileQuads + static_cast<int>(threadIdx.x % 32));
    g += step_g, tile += step_tile;
    if (tile >= w.col_tiles) tile -= w.col_tiles, ++g;
  }
}

// The walk over x [M, N] (N % 4 == 0) with `experts` > 0 offsets, or none (experts 0).
inline ColumnWalk column_walk(const TensorView& x, const TensorView& offsets, int64_t experts) {
  const int64_t n = x.size(x.rank - 1);
  return ColumnWalk{.offsets = experts > 0 ? offsets.as<const int>() : nullptr,
                    .rows = static_cast<int>(x.numel() / n),
                    .quads = static_cast<int>(n / 4),
                    .num_experts = static_cast<int>(experts),
                    .col_tiles = static_cast<int>((n / 4 + kTileQuads - 1) / kTileQuads)};
}

// One launch of column_blocks_kernel over w (nothing for an empty matrix).
template <class Op>
void launch_column_blocks(const ColumnWalk& w, const Op& op, cudaStream_t stream) {
  if (w.rows == 0 || w.quads == 0) return;
  // The device's block count is at most this: each expert adds at most one short block.
  const int64_t blocks = w.offsets ? (int64_t{w.rows} + kColumnBlock - 1) / kColumnBlock +
                                         w.num_experts
                                   : w.rows / kColumnBlock;
  const auto ctas = static_cast<unsigned>(
      std::min((blocks * w.col_tiles + kColumnWarps - 1) / kColumnWarps,
               int64_t{device_sm_count()} * kColumnCtasPerSm));
  column_blocks_kernel<<<ctas, kColumnThreads, 0, stream>>>(w, op);
  MOEFUSE_CUDA_CHECK_LAUNCH();
}

}  // namespace moefuse::cuda::quant
