// FP8 weight gradient of the expert MLPs (DeepSeek-V3 recipe, Hopper sm_90a): the k-grouped GEMM
//   D[e] (+)= Σ_{r of expert e} A[r]ᵀ · B[r]        D [E, N_a, N_b] fp32
// (dW2: A = dys, B = p·act; dW1: A = d_pre, B = xs) from column-wise quantised operands.
//
// Why column-wise: FP8 wgmma reads both operands K-major, and here K is the token dimension (the
// rows of one expert). So each operand is stored transposed, [N, columns] with an expert's rows
// contiguous along a row, quantised in groups of 128 of those rows (128×1 groups of the original
// [M_cap, N] tensor) that never straddle an expert boundary.
//
// The column-wise grouped layout (docs/fp8.md, "k-grouped wgrad"): expert e with m_e rows has
// ceil(m_e / 128) groups; its groups start at
//   group_start[e] = Σ_{e' < e} ceil(m_e' / 128)
// (an exclusive prefix over the offsets, computed on the device by every kernel that needs it;
// empty experts own no group). Row r of expert e (offsets[e] <= r < offsets[e+1]) sits in
//   column 128 · group_start[e] + (r - offsets[e]) of xt, scale group
//   group_start[e] + (r - offsets[e]) / 128.
// Each expert's last group is padded with zero columns up to 128, so every K block the GEMM
// reads holds exactly one scale group of exactly one expert. The capacity is the largest
// Σ ceil(m_e / 128) any valid offsets can need, fp8_colwise_groups(M_cap, E):
//   xt      [N, 128 · fp8_colwise_groups(M_cap, E)]  e4m3
//   scales  [fp8_colwise_groups(M_cap, E), N]         fp32, "K-major": entry [G, n] scales
//                                                     xt[n, 128G .. 128G + 127]
// Groups at or past group_start[E] are never written nor read.
//
// Scale rule: the 1x128 quantiser's (moefuse/quant.h, src/formats/recipes.h blockwise_scale):
// scale = amax / 448 over the group's real rows, 1 for an all-zero group; values e4m3(x · 448 /
// amax), saturating. Padding columns hold +0 (code 0x00).
//
// Both calls are asynchronous on `stream`, allocate nothing, never synchronise and read no
// device memory on the host: CUDA-graph safe. Deterministic (no atomics).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "moefuse/grouped_gemm_fp8.h"
#include "moefuse/tensor.h"

namespace moefuse {

// Groups of the column-wise grouped layout for M_cap rows and E experts: Σ ceil(m_e / 128) with
// Σ m_e <= M_cap is at most (M_cap + 127 · E) / 128.
constexpr int64_t fp8_colwise_groups(int64_t m_cap, int64_t num_experts) {
  return (m_cap + (kFp8ScaleGroup - 1) * num_experts) / kFp8ScaleGroup;
}

// Column-wise grouped quantisation:
//   x       [M_cap, N]                                bf16 (rows expert-contiguous)
//   offsets [E+1]                                     int32, device
//   xt      [N, 128 · fp8_colwise_groups(M_cap, E)]  e4m3 out
//   scales  [fp8_colwise_groups(M_cap, E), N]         fp32 out
// Requirements (InvalidArgument names the argument): N > 0 and N % 8 == 0; 1 <= E <=
// kGroupedGemmMaxExperts; contiguous, 16-byte-aligned device tensors. Rows outside
// [offsets[0], offsets[E]) are never read.
void quantize_fp8_colwise_grouped(const TensorView& x, const TensorView& offsets,
                                  const TensorView& xt, const TensorView& scales,
                                  cudaStream_t stream);

// The same quantisation of the rows gathered from x: row r of the operand is x[gather_index[r]],
// zeros where that index is outside [0, T) — the permute's rows, so dW1's x operand comes
// straight from the tokens without a permuted bf16 copy:
//   x            [T, N]    bf16 (token order)
//   gather_index [M_cap]   int32, device (the dispatch's token_of_row)
// offsets, xt and scales as above, with M_cap = gather_index's length. Bit for bit the codes and
// scales of quantize_fp8_colwise_grouped on the permuted copy.
void quantize_fp8_colwise_grouped_gather(const TensorView& x, const TensorView& gather_index,
                                         const TensorView& offsets, const TensorView& xt,
                                         const TensorView& scales, cudaStream_t stream);

// Both FP8 copies of one operand from one read of it: the column-wise grouped codes and scales
// above (the wgrad's) and, of the same rows, the row-wise 1x128 codes and K-major scales the FP8
// grouped GEMM takes as its A operand (moefuse/grouped_gemm_fp8.h; FC1's dgrad reads d_pre so):
//   x, offsets, xt, scales  as quantize_fp8_colwise_grouped's
//   q_rows                  [M_cap, N]                                e4m3 out
//   q_rows_scales           [ceil(N/128), fp8_scale_rows(M_cap)]      fp32 out, K-major: entry
//                           [g, r] scales q_rows[r, 128g .. 128g+127]
// Rows in [offsets[0], offsets[E]) are bit for bit quantize_fp8_blockwise_1x128's codes and
// (transposed) scales (moefuse/quant.h); the other rows of q_rows and their scale entries are not
// written (a ragged GEMM over these offsets never uses them). xt and scales are bit for bit
// quantize_fp8_colwise_grouped's. Requirements: quantize_fp8_colwise_grouped's, and the four
// outputs disjoint.
void quantize_fp8_rowcol_grouped(const TensorView& x, const TensorView& offsets,
                                 const TensorView& xt, const TensorView& scales,
                                 const TensorView& q_rows, const TensorView& q_rows_scales,
                                 cudaStream_t stream);

// The checks of quantize_fp8_rowcol_grouped with every tensor on `device`, x of dtype x_dtype.
// No CUDA call.
void validate_quantize_fp8_rowcol_grouped(const TensorView& x, const TensorView& offsets,
                                          const TensorView& xt, const TensorView& scales,
                                          const TensorView& q_rows,
                                          const TensorView& q_rows_scales,
                                          Device device = Device::kCuda,
                                          DType x_dtype = DType::kBFloat16);

// The checks of quantize_fp8_colwise_grouped (given a gather_index: of the gather form, whose
// index may be empty for M_cap = 0) with every tensor on `device`, x of dtype x_dtype (the CPU
// reference takes fp32 x). No CUDA call.
void validate_quantize_fp8_colwise_grouped(const TensorView& x, const TensorView& offsets,
                                           const TensorView& xt, const TensorView& scales,
                                           Device device = Device::kCuda,
                                           DType x_dtype = DType::kBFloat16,
                                           const TensorView* gather_index = nullptr);

// The k-grouped FP8 wgrad. With G = fp8_colwise_groups(M_cap, E) (any G >= it works: the
// kernel only reads groups below group_start[E]):
//   at        [N_a, 128 G]  e4m3   A column-wise (quantize_fp8_colwise_grouped of A [M_cap, N_a])
//   a_scales  [G, N_a]      fp32
//   bt        [N_b, 128 G]  e4m3   B column-wise
//   b_scales  [G, N_b]      fp32
//   offsets   [E+1]         int32  the offsets both operands were quantised with
//   d         [E, N_a, N_b] fp32, or bf16 without accumulate (the fp32 result rounded once to
//             nearest even: half the bytes written, the gradient bf16 weights take)
// D[e][i, j] = Σ_G Σ_c deq(at)[i, c] · deq(bt)[j, c] over expert e's groups and their columns,
// promoted into fp32 once per group with a_scales[G, i] · b_scales[G, j] (fp32 accumulation in
// the tensor cores inside one group). An expert with no rows gets D[e] = 0, or D[e] untouched
// (bit for bit) with accumulate.
// Requirements (InvalidArgument names the argument): N_a, N_b > 0 and multiples of 8;
// 1 <= E <= kGroupedGemmMaxExperts; contiguous, 16-byte-aligned device tensors.
struct GroupedGemmFp8WgradArgs {
  TensorView at;
  TensorView a_scales;
  TensorView bt;
  TensorView b_scales;
  TensorView offsets;
  TensorView d;
  bool accumulate = false;  // fp32 d only: D[e] += ... (main-grad accumulation)
};

void grouped_gemm_fp8_wgrad(const GroupedGemmFp8WgradArgs& args, cudaStream_t stream);

// The checks of grouped_gemm_fp8_wgrad with every tensor on `device`. No CUDA call.
void validate_grouped_gemm_fp8_wgrad(const GroupedGemmFp8WgradArgs& args,
                                     Device device = Device::kCuda);

}  // namespace moefuse
