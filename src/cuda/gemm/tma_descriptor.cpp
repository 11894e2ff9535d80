#include "cuda/gemm/tma_descriptor.h"

#include <cudaTypedefs.h>
#include <cuda_runtime.h>

#include <string>

#include "cuda/check.h"
#include "moefuse/error.h"

namespace moefuse::gemm {
namespace {

// cuTensorMapEncodeTiled through the runtime's driver entry point, so that the library needs no
// link against libcuda.
PFN_cuTensorMapEncodeTiled_v12000 encode_tiled() {
  static PFN_cuTensorMapEncodeTiled_v12000 fn = [] {
    void* ptr = nullptr;
    cudaDriverEntryPointQueryResult found{};
    MOEFUSE_CUDA_CHECK(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &ptr, 12000,
                                                        cudaEnableDefault, &found));
    if (found != cudaDriverEntryPointSuccess || ptr == nullptr)
      throw NotSupported("the CUDA driver does not provide cuTensorMapEncodeTiled");
    return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(ptr);
  }();
  return fn;
}

CUtensorMap encode(const void* data, int rank, const cuuint64_t* dims, const cuuint64_t* strides,
                   const cuuint32_t* box) {
  CUtensorMap map{};
  const cuuint32_t element_strides[3] = {1, 1, 1};
  const CUresult status = encode_tiled()(
      &map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, rank, const_cast<void*>(data), dims, strides, box,
      element_strides, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
      CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (status != CUDA_SUCCESS)
    throw CudaError("cuTensorMapEncodeTiled", "CUresult " + std::to_string(status), __FILE__,
                    __LINE__);
  return map;
}

}  // namespace

CUtensorMap make_tma_2d_bf16(const void* data, int64_t rows, int64_t cols, int box_rows,
                             int box_cols) {
  const cuuint64_t dims[2] = {static_cast<cuuint64_t>(cols), static_cast<cuuint64_t>(rows)};
  const cuuint64_t strides[1] = {static_cast<cuuint64_t>(cols) * 2};
  const cuuint32_t box[2] = {static_cast<cuuint32_t>(box_cols), static_cast<cuuint32_t>(box_rows)};
  return encode(data, 2, dims, strides, box);
}

CUtensorMap make_tma_3d_bf16(const void* data, int64_t batch, int64_t rows, int64_t cols,
                             int box_rows, int box_cols) {
  const cuuint64_t dims[3] = {static_cast<cuuint64_t>(cols), static_cast<cuuint64_t>(rows),
                              static_cast<cuuint64_t>(batch)};
  const cuuint64_t strides[2] = {static_cast<cuuint64_t>(cols) * 2,
                                 static_cast<cuuint64_t>(rows * cols) * 2};
  const cuuint32_t box[3] = {static_cast<cuuint32_t>(box_cols), static_cast<cuuint32_t>(box_rows),
                             1};
  return encode(data, 3, dims, strides, box);
}

}  // namespace moefuse::gemm
