#include "cuda/gemm/common/tensor_map.h"

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

// dims and box innermost first; strides (bytes) of dims 1.. .
CUtensorMap encode(const TmaElement& element, const void* data, int rank, const cuuint64_t* dims,
                   const cuuint64_t* strides, const cuuint32_t* box) {
  CUtensorMap map{};
  const cuuint32_t element_strides[3] = {1, 1, 1};
  const CUresult status = encode_tiled()(
      &map, element.type, rank, const_cast<void*>(data), dims, strides, box, element_strides,
      CU_TENSOR_MAP_INTERLEAVE_NONE, element.swizzle, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
      CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (status != CUDA_SUCCESS)
    throw CudaError("cuTensorMapEncodeTiled", "CUresult " + std::to_string(status), __FILE__,
                    __LINE__);
  return map;
}

cuuint64_t u64(int64_t v) { return static_cast<cuuint64_t>(v); }
cuuint32_t u32(int v) { return static_cast<cuuint32_t>(v); }

}  // namespace

CUtensorMap make_tma_2d(const TmaElement& element, const void* data, int64_t rows, int64_t cols,
                        int box_rows, int box_cols) {
  const cuuint64_t dims[2] = {u64(cols), u64(rows)};
  const cuuint64_t strides[1] = {u64(cols * element.bytes)};
  const cuuint32_t box[2] = {u32(box_cols), u32(box_rows)};
  return encode(element, data, 2, dims, strides, box);
}

CUtensorMap make_tma_3d(const TmaElement& element, const void* data, int64_t batch, int64_t rows,
                        int64_t cols, int box_rows, int box_cols) {
  const cuuint64_t dims[3] = {u64(cols), u64(rows), u64(batch)};
  const cuuint64_t strides[2] = {u64(cols * element.bytes), u64(rows * cols * element.bytes)};
  const cuuint32_t box[3] = {u32(box_cols), u32(box_rows), 1};
  return encode(element, data, 3, dims, strides, box);
}

}  // namespace moefuse::gemm
