// Host-side TMA descriptors (CUtensorMap) of the GEMM kernels' operands, built from pointers and
// shapes only: no device memory is read, so building them is CUDA-graph safe. One encoder serves
// every element type; the element says how TMA reads it and how its boxes land in shared memory.
#pragma once

#include <cuda.h>

#include <cstdint>

namespace moefuse::gemm {

struct TmaElement {
  CUtensorMapDataType type;
  int bytes;  // per element
  CUtensorMapSwizzle swizzle;
};

// bf16 and e4m3 operands land 128B-swizzled (the wgmma descriptors' layout); the FP8 kernel's
// fp32 activation scales land as plain rows. The wgrads' fp32 (or bf16) D leaves 128B-swizzled
// sub-tiles (backward/slab_tma_store.cuh).
inline constexpr TmaElement kTmaBf16{.type = CU_TENSOR_MAP_DATA_TYPE_BFLOAT16,
                                     .bytes = 2,
                                     .swizzle = CU_TENSOR_MAP_SWIZZLE_128B};
inline constexpr TmaElement kTmaE4m3{.type = CU_TENSOR_MAP_DATA_TYPE_UINT8,
                                     .bytes = 1,
                                     .swizzle = CU_TENSOR_MAP_SWIZZLE_128B};
inline constexpr TmaElement kTmaF32{.type = CU_TENSOR_MAP_DATA_TYPE_FLOAT32,
                                    .bytes = 4,
                                    .swizzle = CU_TENSOR_MAP_SWIZZLE_128B};
inline constexpr TmaElement kTmaF32Rows{.type = CU_TENSOR_MAP_DATA_TYPE_FLOAT32,
                                        .bytes = 4,
                                        .swizzle = CU_TENSOR_MAP_SWIZZLE_NONE};

// Row-major [rows, cols] read in boxes of [box_rows, box_cols]; coordinates past the extents
// read zeros. cols · element bytes must be a multiple of 16 (TMA's row-stride rule).
CUtensorMap make_tma_2d(const TmaElement& element, const void* data, int64_t rows, int64_t cols,
                        int box_rows, int box_cols);

// Row-major [batch, rows, cols], boxes of [1, box_rows, box_cols] (stores clip at the extents).
CUtensorMap make_tma_3d(const TmaElement& element, const void* data, int64_t batch, int64_t rows,
                        int64_t cols, int box_rows, int box_cols);

}  // namespace moefuse::gemm
