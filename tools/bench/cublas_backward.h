// cuBLAS references for `moefuse-bench gemm-backward`: dense GEMMs of the same shapes as the
// backward grouped GEMMs (the bound they are measured against), with the transposes they need.
// Separate from CublasBaseline (the forward's references) so that neither grows the other.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "bench/device_buffer.h"

namespace moefuse::bench {

class CublasBackward {
 public:
  CublasBackward();
  ~CublasBackward();
  CublasBackward(const CublasBackward&) = delete;
  CublasBackward& operator=(const CublasBackward&) = delete;

  // dgrad shape: row-major D [m, n] (bf16) = A [m, k] · B [k, n] (B as stored, n contiguous).
  void dgrad_bf16(const void* a, const void* b, void* d, int64_t m, int64_t n, int64_t k,
                  cudaStream_t stream);

  // wgrad shape: row-major D [m_out, n_out] (fp32) = A [k, m_out]ᵀ · B [k, n_out], k = the rows.
  void wgrad_f32(const void* a, const void* b, void* d, int64_t m_out, int64_t n_out, int64_t k,
                 cudaStream_t stream);

  // `batches` wgrads back to back (strided batched): D[i] = A_iᵀ · B_i with A_i, B_i the rows
  // [i·k, (i+1)·k) — the grouped wgrad with equal counts, every expert's fp32 output written.
  void wgrad_batched_f32(const void* a, const void* b, void* d, int64_t m_out, int64_t n_out,
                         int64_t k, int64_t batches, cudaStream_t stream);

 private:
  cublasHandle_t handle_ = nullptr;
  DeviceBuffer workspace_;
};

}  // namespace moefuse::bench
