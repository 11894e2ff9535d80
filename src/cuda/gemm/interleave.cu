// GPU version of interleave_glu_weight / deinterleave_glu_weight: one block per reference row,
// copied to (or from) its interleaved position (moefuse::glu_interleaved_row).
#include <cstdint>
#include <string>

#include "cuda/check.h"
#include "cuda/gemm/launch.h"
#include "moefuse/grouped_gemm.h"

namespace moefuse::gemm {
namespace {

__global__ void permute_glu_rows_kernel(const uint8_t* src, uint8_t* dst, int64_t ffn,
                                        int64_t row_bytes, bool to_interleaved) {
  const int64_t rows = 2 * ffn;
  const int64_t outer = blockIdx.x / rows, r = blockIdx.x % rows;
  const int64_t interleaved = glu_interleaved_row(r, ffn);
  const uint8_t* s = src + (outer * rows + (to_interleaved ? r : interleaved)) * row_bytes;
  uint8_t* d = dst + (outer * rows + (to_interleaved ? interleaved : r)) * row_bytes;
  const bool vector = row_bytes % 16 == 0 && reinterpret_cast<uintptr_t>(src) % 16 == 0 &&
                      reinterpret_cast<uintptr_t>(dst) % 16 == 0;
  if (vector) {
    for (int64_t i = threadIdx.x; i < row_bytes / 16; i += blockDim.x)
      reinterpret_cast<uint4*>(d)[i] = reinterpret_cast<const uint4*>(s)[i];
  } else {
    for (int64_t i = threadIdx.x; i < row_bytes; i += blockDim.x) d[i] = s[i];
  }
}

}  // namespace

void launch_permute_glu_rows(const void* src, void* dst, int64_t outer, int64_t ffn,
                             int64_t row_bytes, bool to_interleaved, cudaStream_t stream) {
  const int64_t blocks = outer * 2 * ffn;
  MOEFUSE_EXPECT(blocks < (int64_t{1} << 31), "src", "fewer than 2^31 rows",
                 std::to_string(blocks));
  permute_glu_rows_kernel<<<static_cast<unsigned>(blocks), 128, 0, stream>>>(
      static_cast<const uint8_t*>(src), static_cast<uint8_t*>(dst), ffn, row_bytes,
      to_interleaved);
  MOEFUSE_CUDA_CHECK_LAUNCH();
}

}  // namespace moefuse::gemm
