// The MXFP8 recipe of grouped_gemm_fp8 on Hopper, emulated exactly (moefuse/grouped_gemm_fp8.h
// says why and what it costs): the operands dequantised to bf16 into the caller's workspace, then
// the BF16 grouped GEMM on them. Host side; the dequantise kernel is mxfp8_emulation.cu's.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "moefuse/grouped_gemm.h"
#include "moefuse/grouped_gemm_fp8.h"

namespace moefuse::gemm::fp8 {

// Where the bf16 operands lie in GroupedGemmFp8Args::workspace: deq(a) [M_cap, K] at offset 0,
// deq(b) [E, N, K] at b_offset (256-byte aligned, as the workspace's own base).
struct Mxfp8Workspace {
  size_t b_offset;
  size_t bytes;  // total, a multiple of 256
};
Mxfp8Workspace mxfp8_workspace(int64_t m_cap, int64_t experts, int64_t n, int64_t k);

// The BF16 grouped GEMM's arguments for MXFP8 args (shapes validated, workspace large enough):
// a and b are the workspace's bf16 copies, every other tensor and option is args'.
GroupedGemmArgs mxfp8_bf16_gemm_args(const GroupedGemmFp8Args& args);

// codes [rows, K] e4m3 (a [M_cap, K], b [E, N, K]) with their K-major scales [rows / batch_rows,
// K/32, pitch] e8m0 (a: one batch, pitch mxfp8_scale_rows(M_cap); b: E batches of N rows, pitch N)
// into out of the codes' shape, bf16, exactly rounded: the kernel of mxfp8_emulation.cu. Every
// row is converted. Validated views (K % 32 == 0, 16-byte aligned).
void dequantize_mxfp8_kmajor_bf16(const TensorView& codes, const TensorView& scales,
                                  const TensorView& out, int64_t batch_rows, int64_t pitch,
                                  cudaStream_t stream);

// Writes deq(a) and deq(b) as bf16 into the workspace (validated args): two kernels on `stream`.
void launch_mxfp8_dequantize(const GroupedGemmFp8Args& args, cudaStream_t stream);

}  // namespace moefuse::gemm::fp8
