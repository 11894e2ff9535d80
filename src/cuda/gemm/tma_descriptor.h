// Host-side TMA descriptors (CUtensorMap) of the grouped GEMM's operands, built from pointers and
// shapes only: no device memory is read, so building them is CUDA-graph safe.
#pragma once

#include <cuda.h>

#include <cstdint>

namespace moefuse::gemm {

// bf16 row-major [rows, cols] read in boxes of [box_rows, box_cols], 128B swizzle; coordinates
// past the extents read zeros. cols % 8 == 0 (16-byte row stride).
CUtensorMap make_tma_2d_bf16(const void* data, int64_t rows, int64_t cols, int box_rows,
                             int box_cols);

// bf16 row-major [batch, rows, cols], boxes of [1, box_rows, box_cols], 128B swizzle.
CUtensorMap make_tma_3d_bf16(const void* data, int64_t batch, int64_t rows, int64_t cols,
                             int box_rows, int box_cols);

}  // namespace moefuse::gemm
