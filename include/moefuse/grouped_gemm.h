// Ragged-M grouped GEMM for the expert MLPs (Hopper, sm_90a): BF16 operands, fp32 accumulation.
//
//   A       [M_cap, K]  bf16  rows of all experts stacked expert-contiguous (or, with
//                             gather_index, the unpermuted activations x [T, K])
//   B       [E, N, K]   bf16  one weight per expert, K contiguous (nn.Linear layout)
//   offsets [E+1]       int32 device; expert e owns rows [offsets[e], offsets[e+1]). Read on the
//                             device only: the host never learns the counts.
//   D       [M_cap, N_out]    bf16 or fp32; N_out = N / 2 for the GLU activations, N otherwise.
//
// For every row r of expert e:  h = A[r] · B[e]ᵀ (+ bias[e]);  D[r] = epilogue(h) (· row_scale[r]).
// Rows outside [offsets[0], offsets[E]) of D (and of pre_activation) are never written. Experts
// with zero rows and offsets[E] == offsets[0] (no rows at all) are fine. No padding of an
// expert's rows is needed. M_cap is the caller's worst-case capacity (e.g. T·k); offsets[E] must
// not exceed it (rows past M_cap are never written even if the offsets say so).
//
// GLU weights are column-interleaved: the kernel pairs gate and up columns inside one thread's
// accumulators, so B's N = 2F rows alternate blocks of kGluInterleave gate rows and
// kGluInterleave up rows (see glu_interleaved_row). Convert a reference [gate; up] weight
// [E, 2F, H] (and a bias [E, 2F]) with interleave_glu_weight.
//
// Requirements (validated, InvalidArgument names the argument): K % 8 == 0 and K > 0 (TMA needs
// 16-byte row strides); N % 8 == 0 (N % 16 == 0 for GLU); contiguous tensors; device kCuda for
// all device tensors; E >= 1 and E <= kGroupedGemmMaxExperts.
//
// Every call is asynchronous on `stream`, allocates nothing, never synchronises and reads nothing
// from device memory on the host: it is CUDA-graph safe. A captured launch stays valid while the
// buffers (pointers, shapes) stay the same; offsets and data may change between replays.
//
// Not yet implemented: an FP8 variant; smem-staged (TMA-store) epilogue — the epilogue stores
// straight from registers; gather_index in grouped_gemm_unfused needs the caller's gathered_a
// scratch (it runs a separate gather kernel).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "moefuse/config.h"
#include "moefuse/tensor.h"

namespace moefuse {

// Gate/up interleave granularity of GLU weights (rows of B, columns of the GEMM output).
inline constexpr int64_t kGluInterleave = 8;
inline constexpr int64_t kGroupedGemmMaxExperts = 1024;

// Interleaved row of reference row r (of a [gate; up] weight with 2F rows, F = ffn).
// Reference gate row g (g < F) goes to 16·(g/8) + g%8; up row F + u goes to 16·(u/8) + 8 + u%8.
constexpr int64_t glu_interleaved_row(int64_t r, int64_t ffn) {
  const bool up = r >= ffn;
  const int64_t j = up ? r - ffn : r;
  return 2 * kGluInterleave * (j / kGluInterleave) + (up ? kGluInterleave : 0) +
         j % kGluInterleave;
}

enum class GemmEpilogue : uint8_t {
  kLinear,      // D = h (· row_scale)                                  FC2, or FC1 unfused
  kActivation,  // D = activation(h) (· row_scale); GLU halves N        FC1
};

struct GroupedGemmArgs {
  TensorView a;        // [M_cap, K] bf16; with gather_index: x [T, K] bf16
  TensorView b;        // [E, N, K] bf16 (GLU: interleaved rows)
  TensorView offsets;  // [E+1] int32
  TensorView d;        // [M_cap, N_out] bf16 or fp32

  GemmEpilogue epilogue = GemmEpilogue::kLinear;
  Activation activation = Activation::kSwiGLU;  // used with kActivation
  ClampedSwiGLUParams clamped_swiglu{};          // used with Activation::kClampedSwiGLU

  // Optional (empty view = absent).
  TensorView bias;            // [E, N] fp32, added to h before the activation (interleaved for GLU)
  TensorView row_scale;       // [M_cap] fp32, multiplies the final output (routing probability)
  TensorView pre_activation;  // [M_cap, N] bf16: h (with bias) saved for backward (kActivation)
  // [M_cap] int32: row r of the GEMM reads A row gather_index[r]; an index outside [0, T) reads
  // zeros. The permuted copy of x is never written (gather-fused FC1).
  TensorView gather_index;

  // The fused kernel's persistent CTAs, one an SM: 0 for every SM; fewer leave SMs free for
  // kernels running beside it (expert parallelism's transfers). The unfused twin ignores it.
  int max_ctas = 0;
};

// The fused kernel: TMA + wgmma, persistent grid (one CTA per SM), epilogue in registers.
void grouped_gemm(const GroupedGemmArgs& args, cudaStream_t stream);

// Scratch of the unfused twin.
struct GroupedGemmUnfusedScratch {
  TensorView gathered_a;  // [M_cap, K] bf16, needed iff args.gather_index is set
};

// The unfused twin, same math as separate kernels, to measure what each fusion buys:
// [gather kernel →] plain grouped GEMM → elementwise kernel (bias, activation, row scale).
// With kActivation, args.pre_activation is required (it is the plain GEMM's output); on return it
// holds h with bias, as after grouped_gemm. With kLinear, D holds h and is updated in place.
void grouped_gemm_unfused(const GroupedGemmArgs& args, const GroupedGemmUnfusedScratch& scratch,
                          cudaStream_t stream);

// Validates args as both entry points do (no CUDA call). Throws InvalidArgument.
void validate_grouped_gemm(const GroupedGemmArgs& args);

// Tile geometry of the bf16-output kernel (A by TMA) for a weight of N columns, for reports:
// 128 × 256 tiles, or 128 × 192 where 192 divides N and 256 does not (gpt-oss's 2880 and 5760).
// The fp32-output and gather variants always run 128 × 256. Throws InvalidArgument for n <= 0.
struct GroupedGemmTile {
  int block_m;  // rows of A per tile
  int block_n;  // columns of h per tile (GLU: block_n / 2 outputs)
  int block_k;
  int stages;
};
GroupedGemmTile grouped_gemm_tile(int64_t n);

// [gate; up] → interleaved along dim 1. src and dst: [E, 2F, H] weights or [E, 2F] biases, same
// shape, dtype bf16 or fp32, both kCpu (host loop) or both kCuda (a kernel on `stream`).
// src and dst must not alias.
void interleave_glu_weight(const TensorView& src, const TensorView& dst,
                           cudaStream_t stream = nullptr);

// interleaved → [gate; up] (the inverse, for gradients of interleaved weights). Same rules.
void deinterleave_glu_weight(const TensorView& src, const TensorView& dst,
                             cudaStream_t stream = nullptr);

}  // namespace moefuse
