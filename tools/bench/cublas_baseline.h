// cuBLAS references for the GEMM benchmarks: the dense bound (one GEMM of the same total size)
// and the per-expert loop (what a naive MoE does, with the counts known on the host).
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <vector>

#include "bench/device_buffer.h"

namespace moefuse::bench {

class CublasBaseline {
 public:
  CublasBaseline();
  ~CublasBaseline();
  CublasBaseline(const CublasBaseline&) = delete;
  CublasBaseline& operator=(const CublasBaseline&) = delete;

  // Row-major D [m, n] (bf16) = A [m, k] · B [n, k]ᵀ, bf16 operands, fp32 accumulation.
  void gemm_bf16(const void* a, const void* b, void* d, int64_t m, int64_t n, int64_t k,
                 cudaStream_t stream);

  // For each expert e: D rows [offsets[e], offsets[e+1]) = A rows · B[e]ᵀ, one call per expert.
  void per_expert_bf16(const void* a, const void* b, void* d, const std::vector<int32_t>& offsets,
                       int64_t n, int64_t k, cudaStream_t stream);

 private:
  cublasHandle_t handle_ = nullptr;
  DeviceBuffer workspace_;
};

}  // namespace moefuse::bench
