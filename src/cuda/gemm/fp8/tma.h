// Host-side TMA descriptors of the FP8 grouped GEMM's operands (e4m3 values with 128B swizzle,
// fp32 activation scales unswizzled), built from pointers and shapes only: CUDA-graph safe.
//
// tma_descriptor.h builds the bf16 maps of the BF16 kernel; these are the FP8 kernel's own.
#pragma once

#include <cuda.h>

#include <cstdint>

namespace moefuse::gemm::fp8 {

// e4m3 row-major [rows, cols], boxes [box_rows, box_cols], 128B swizzle, zeros past the extents.
// cols % 16 == 0 (16-byte row stride); box_cols = 128 (one swizzle row).
CUtensorMap make_tma_2d_e4m3(const void* data, int64_t rows, int64_t cols, int box_rows,
                             int box_cols);

// e4m3 row-major [batch, rows, cols], boxes [1, box_rows, box_cols], 128B swizzle.
CUtensorMap make_tma_3d_e4m3(const void* data, int64_t batch, int64_t rows, int64_t cols,
                             int box_rows, int box_cols);

// fp32 row-major [rows, cols] (the K-major activation scales: rows = K groups, cols = M_cap
// padded to 4), boxes [1, box_cols], no swizzle. cols % 4 == 0.
CUtensorMap make_tma_2d_f32_rows(const void* data, int64_t rows, int64_t cols, int box_cols);

}  // namespace moefuse::gemm::fp8
