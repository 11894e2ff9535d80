// Backward grouped GEMMs of the expert MLPs with MXFP8 operands (OCP MX: E4M3 values, one UE8M0
// power-of-two scale per 32 elements along the GEMM's K), Hopper sm_90a. The twins of the BF16
// backward calls (moefuse/grouped_gemm_backward.h), with the same outputs and epilogues.
//
// Each call takes the BF16 call's arguments with its two GEMM operands left empty, and those two
// operands as MXFP8 codes with scales, each quantised along the GEMM's K and never transposed:
//   call                           first operand                     second operand
//   grouped_gemm_dgrad_mxfp8       a   [M_cap, K]       rows         b  [E, K, N]        weights
//   grouped_gemm_fc2_dgrad_mxfp8   dys [M_cap, H]       rows         w2 [E, H, F]        weights
//   grouped_gemm_wgrad_mxfp8       a   [M_cap, M_out]   grouped      b  [M_cap, N_out]   grouped
// Scale layouts (e8m0):
//   rows      [K/32, mxfp8_scale_rows(M_cap)], K-major: entry [j, r] scales a[r, 32j .. 32j + 31]
//             (grouped_gemm_fp8's MXFP8 a_scales; transpose_mxfp8_activation_scales converts
//             quantize_mxfp8's); K % 32 == 0.
//   weights   [E, K/32, N]: entry [e, j, n] scales b[e, 32j .. 32j + 31, n], K % 32 == 0:
//             quantize_mxfp8_cols of the [E·K, N] view, without offsets.
//   grouped   [mxfp8_col_blocks(M_cap, E), N]: 32-row blocks restarting at each expert's first
//             row, quantize_mxfp8_cols with the call's offsets (moefuse/quant.h): a wgrad's K is
//             an expert's rows, and a block never spans two experts. No per-expert padding.
// Why not transposed, unlike the DeepSeek recipe's FP8 operands (moefuse/grouped_gemm_fp8_dgrad.h,
// _wgrad.h): those follow Hopper's FP8 wgmma, which reads both operands K-major and which the
// MXFP8 calls below never use; Transformer Engine, too, keeps its MXFP8 column-wise data in the
// tensor's own layout. So the weights are the forward's own arrays re-quantised along the other
// axis, not copies in another layout.
//
// How the GPU computes them (the MXFP8 forward's emulation, moefuse/grouped_gemm_fp8.h): both
// operands are dequantised into `workspace` as bf16 — an E4M3 value times a power of two is a bf16
// value, exact but at the range ends that header lists — and the BF16 call runs on the copies. So
// the results are bit for bit the BF16 call's on the dequantised operands: the same rounding of
// outputs (and of the FC2 dgrad's g to bf16), the same determinism. The workspace holds, at offset
// 0, the first operand's bf16 copy (codes' shape), then the second's at the first's size rounded
// up to 256 bytes; mxfp8_backward_workspace_size gives the bytes. Rows the BF16 call never reads
// (outside [offsets[0], offsets[E]) of a grouped operand) are not converted.
//
// Requirements: the BF16 call's (on the copies: InvalidArgument names the BF16 argument the
// operand replaces, "a" or "b", "dys" or "w2"), the layouts above (InvalidArgument names
// "a" / "a_scales" / "b" / "b_scales" (or "dys", "w2" and their scales), expected and actual
// shape), args' operand fields empty, no gather_index in the wgrad (its b is the permuted rows
// already quantised), codes 16-byte aligned, and a workspace of at least
// mxfp8_backward_workspace_size bytes, 256-byte aligned, overlapping no tensor of the call.
// Asynchronous on `stream` (two dequantise launches, then the BF16 call's), allocate nothing,
// never synchronise, read no device memory on the host: CUDA-graph safe.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>

#include "moefuse/grouped_gemm_backward.h"
#include "moefuse/tensor.h"
#include "moefuse/workspace.h"

namespace moefuse {

// One MXFP8 operand: E4M3 codes and their e8m0 scales, in one of the layouts above.
struct Mxfp8Operand {
  TensorView codes;
  TensorView scales;
};

// Bytes of the workspace for the operands' bf16 copies (reads the codes' shapes only).
size_t mxfp8_backward_workspace_size(const Mxfp8Operand& first, const Mxfp8Operand& second);

// D[r] = deq(a)[r] · deq(b)[e]: a rows, b weights; args.a and args.b empty.
void grouped_gemm_dgrad_mxfp8(const Mxfp8Operand& a, const Mxfp8Operand& b,
                              const GroupedGemmDgradArgs& args, const Workspace& workspace,
                              cudaStream_t stream);

// The fused FC2 dgrad (dGLU, scaled_act, dp, d_b2) on deq(dys) and deq(w2): dys rows, w2
// weights; args.dys and args.w2 empty. dp's bias term and d_b2 read deq(dys).
void grouped_gemm_fc2_dgrad_mxfp8(const Mxfp8Operand& dys, const Mxfp8Operand& w2,
                                  const Fc2DgradArgs& args, const Fc2DgradScratch& scratch,
                                  const Workspace& workspace, cudaStream_t stream);

// D[e] (+)= Σ_{r of e} deq(a)[r]ᵀ · deq(b)[r]: a and b grouped by args.offsets; args.a, args.b
// and args.gather_index empty.
void grouped_gemm_wgrad_mxfp8(const Mxfp8Operand& a, const Mxfp8Operand& b,
                              const GroupedGemmWgradArgs& args, const Workspace& workspace,
                              cudaStream_t stream);

// The checks of each call (device tensors), without a CUDA call. Throw InvalidArgument.
void validate_grouped_gemm_dgrad_mxfp8(const Mxfp8Operand& a, const Mxfp8Operand& b,
                                       const GroupedGemmDgradArgs& args,
                                       const Workspace& workspace);
void validate_fc2_dgrad_mxfp8(const Mxfp8Operand& dys, const Mxfp8Operand& w2,
                              const Fc2DgradArgs& args, const Fc2DgradScratch& scratch,
                              const Workspace& workspace);
void validate_grouped_gemm_wgrad_mxfp8(const Mxfp8Operand& a, const Mxfp8Operand& b,
                                       const GroupedGemmWgradArgs& args,
                                       const Workspace& workspace);

}  // namespace moefuse
