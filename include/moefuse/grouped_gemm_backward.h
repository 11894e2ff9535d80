// Backward of the expert MLPs' grouped GEMMs (Hopper, sm_90a): BF16 operands, fp32 accumulation.
//
// Forward (moefuse/grouped_gemm.h), for the rows r of expert e (offsets in device memory):
//   pre[r] = xs[r]·W1[e]ᵀ (+ b1[e])        [M_cap, fc1]  fc1 = 2F (GLU, interleaved) or F
//   act[r] = activation(pre[r])            [M_cap, F]
//   ys[r]  = p[r] · (act[r]·W2[e]ᵀ + b2[e]) [M_cap, H]   p: routing probability (row_scale), or 1
// Backward, given dys = ∂L/∂ys:
//   g       = dys·W2[e]                    FC2 dgrad         (grouped_gemm_fc2_dgrad, fused)
//   d_act   = p · g;   d_pre = activation'(pre) ⊙ d_act       ... the dGLU epilogue
//   dp[r]   = ⟨g[r], act[r]⟩ + ⟨dys[r], b2[e]⟩ = ⟨dys[r], ys[r] / p[r]⟩   (routing-prob gradient)
//   d_b2[e] = Σ_r p[r]·dys[r]                                             (FC2 bias gradient)
//   dxs     = d_pre·W1[e]                  FC1 dgrad         (grouped_gemm_dgrad)
//   dW1[e]  = Σ_r d_pre[r]ᵀ·xs[r]          FC1 wgrad         (grouped_gemm_wgrad)
//   dW2[e]  = Σ_r dys[r]ᵀ·(p[r]·act[r])    FC2 wgrad         (grouped_gemm_wgrad on scaled_act)
// The token-order sum of dxs over the k choices is moefuse::permute_backward (dispatch.h).
//
// Layouts are the forward's: W1 [E, fc1, H] (GLU rows interleaved, glu_interleaved_row), W2
// [E, H, F], pre and d_pre in the kernel's (interleaved) column order. No weight is transposed or
// copied: the kernels read the weights "MN-major" (wgmma's transposed shared-memory operand).
//
// Common rules (as the forward): offsets [E+1] int32 in device memory, never read by the host;
// rows outside [offsets[0], offsets[E]) of every row-indexed output are never written; experts
// with no rows and no rows at all are fine; M_cap >= offsets[E]. Every extent that is a row
// length (K or N of a dgrad, M_out/N_out of a wgrad) must be a positive multiple of 8 (16-byte
// TMA strides); E in [1, kGroupedGemmMaxExperts]; tensors contiguous, 16-byte aligned, kCuda.
// Bad arguments throw InvalidArgument naming the argument. Every call is asynchronous on
// `stream`, allocates nothing, never synchronises, reads nothing on the host: CUDA-graph safe
// (a captured launch stays valid while pointers and shapes stay the same; offsets and data may
// change between replays). Results are deterministic (no float atomics).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "moefuse/config.h"
#include "moefuse/grouped_gemm.h"
#include "moefuse/tensor.h"

namespace moefuse {

// ---- dgrad: D[r] = A[r] · B[e] (B used as stored, [K, N] with N contiguous) --------------------
//   FC1 dgrad: a = d_pre [M_cap, fc1], b = W1 [E, fc1, H]  → d = dxs [M_cap, H]
//   FC2 dgrad without fusion: a = dys [M_cap, H], b = W2 [E, H, F] → d = g [M_cap, F]
struct GroupedGemmDgradArgs {
  TensorView a;        // [M_cap, K] bf16
  TensorView b;        // [E, K, N] bf16
  TensorView offsets;  // [E+1] int32
  TensorView d;        // [M_cap, N] bf16 or fp32
  int max_ctas = 0;    // persistent CTAs (0: one per SM), as GroupedGemmArgs::max_ctas
  // Optional: moefuse::permute (dispatch.h) run inside the same launch by the epilogue warps,
  // in the time they wait for the next tile, writing exactly what permute writes (xs[row_of[t,
  // j]] = x[t], rows whose token_of_row is -1 zeroed, bad rows flagged in health). The
  // backward's FC1 dgrad builds the FC1 wgrad's xs this way, so that the copy's HBM traffic runs
  // under a compute-bound GEMM instead of as a pass of its own (docs/grouped_gemm_backward.md).
  // x, row_of, token_of_row and xs all given or none (x of T = 0 tokens may hold no data;
  // health optional); xs apart from every other operand. Shapes as permute's, checked as
  // permute checks them (errors name "permute.<view>"); bf16 d only.
  struct Permute {
    TensorView x;             // [T, H] bf16
    TensorView row_of;        // [T, k] int32
    TensorView token_of_row;  // [R] int32
    TensorView xs;            // [R, H] bf16 out
    TensorView health;        // int32 [1] or absent
  } permute;
};
void grouped_gemm_dgrad(const GroupedGemmDgradArgs& args, cudaStream_t stream);
void validate_grouped_gemm_dgrad(const GroupedGemmDgradArgs& args);

// ---- FC2 dgrad fused with the activation backward and the routing-prob gradient --------------
struct Fc2DgradArgs {
  TensorView dys;      // [M_cap, H] bf16: gradient of the forward's (p-scaled) ys
  TensorView w2;       // [E, H, F] bf16
  TensorView offsets;  // [E+1] int32
  TensorView pre;      // [M_cap, fc1] bf16: the forward's saved pre-activation (with b1)
  TensorView d_pre;    // [M_cap, fc1] bf16 out: ∂L/∂pre, same (interleaved) column order
  Activation activation = Activation::kSwiGLU;
  ClampedSwiGLUParams clamped_swiglu{};  // used with Activation::kClampedSwiGLU

  // Optional (empty view = absent).
  TensorView row_scale;    // [M_cap] fp32 p; absent: p = 1 (weights applied by the combine)
  TensorView scaled_act;   // [M_cap, F] bf16 out: p·act, the FC2 wgrad's b operand (recomputed)
  TensorView d_row_scale;  // [M_cap] fp32 out: dp (needs scratch.dp_partial in the fused call)
  TensorView b2;           // [E, H] fp32: FC2 bias, adds ⟨dys[r], b2[e]⟩ to dp (d_row_scale only)
  TensorView d_b2;         // [E, H] fp32 out: Σ_r p[r]·dys[r] over each expert's rows (p = 1
                           // without row_scale), summed in a fixed order; experts without rows 0
  bool accumulate_d_b2 = false;  // d_b2 += that sum instead (experts without rows unchanged)
  // The fused kernel's persistent CTAs (0: one per SM). It runs in 2-CTA clusters: an odd count
  // is rounded down, and 1 runs one cluster of two.
  int max_ctas = 0;
};

// Scratch of the FC2 dgrad (caller-owned, contents irrelevant on entry).
struct Fc2DgradScratch {
  // Fused: [M_cap, fc2_dgrad_dp_blocks(F)] fp32, required iff d_row_scale is set: per-(row,
  // n-block) partial sums of dp, reduced in a fixed order by a small second kernel.
  TensorView dp_partial;
  // Fused, with b2, optional: [fc2_dgrad_bias_pieces(H), M_cap] fp32. Given, dp's b2 term comes
  // out of the pass over dys that d_b2 makes (or a pass of its own without d_b2), as partial dots
  // of 256 columns that the dp reduction adds; absent, the dp reduction reads dys once more.
  // (gpt-oss-120b in the layer's graph: the two passes 117 + 100 µs, the one 129 and the dp
  // reduction 5: session 35.)
  TensorView bias_partial;
  // Unfused twin only: [M_cap, F] bf16, the plain GEMM's g.
  TensorView g;
  // [fc2_dgrad_d_b2_units(M_cap, E), H] fp32, required iff d_b2 is set: d_b2's partial sums, one
  // row per unit of 256 rows of an expert, added per expert in unit order. An expert's rows are
  // thus summed by as many blocks as they fill, however skewed the routing.
  TensorView d_b2_units;
};
int64_t fc2_dgrad_dp_blocks(int64_t ffn);
int64_t fc2_dgrad_bias_pieces(int64_t hidden);
int64_t fc2_dgrad_d_b2_units(int64_t m_cap, int64_t experts);

// The fused kernel (dGLU and dp in the GEMM's epilogue warps, overlapped with the next tile's
// mainloop; g reaches them rounded to bf16, as in the unfused twin) + the dp reduction.
void grouped_gemm_fc2_dgrad(const Fc2DgradArgs& args, const Fc2DgradScratch& scratch,
                            cudaStream_t stream);
// The unfused twin: plain dgrad into scratch.g (bf16) → one elementwise kernel (activation
// backward, scaled_act, dp with its bias term) → d_b2's column sums. Same math; g rounded to
// bf16 in between. scratch.bias_partial must be empty.
void grouped_gemm_fc2_dgrad_unfused(const Fc2DgradArgs& args, const Fc2DgradScratch& scratch,
                                    cudaStream_t stream);
void validate_fc2_dgrad(const Fc2DgradArgs& args);

// ---- wgrad, k-grouped: D[e] = Σ_{r of e} a[r]ᵀ · b[r] ------------------------------------------
//   dW1: a = d_pre [M_cap, fc1], b = xs [M_cap, H]           → d [E, fc1, H] (W1's layout)
//   dW2: a = dys [M_cap, H],     b = scaled_act [M_cap, F]   → d [E, H, F]   (W2's layout)
// The reduction length of expert e is its row count, read on the device. Experts with zero rows
// get D[e] = 0, or D[e] untouched (bit for bit) with accumulate.
struct GroupedGemmWgradArgs {
  TensorView a;        // [M_cap, M_out] bf16
  TensorView b;        // [M_cap, N_out] bf16; with gather_index: x [T, N_out] (token order)
  TensorView offsets;  // [E+1] int32
  TensorView d;        // [E, M_out, N_out] fp32 or bf16
  bool accumulate = false;  // fp32 d only: D[e] += Σ ... (main-grad accumulation)
  // Optional: [M_cap] int32, row r of b is x[gather_index[r]] (token_of_row; an index outside
  // [0, T) reads zeros): dW1 straight from the unpermuted activations, xs never materialised.
  TensorView gather_index;
  // Persistent CTAs (0: one per SM), as GroupedGemmArgs::max_ctas. A tile's sum does not depend
  // on it (one CTA sums all of an expert's rows for a tile).
  int max_ctas = 0;
};
void grouped_gemm_wgrad(const GroupedGemmWgradArgs& args, cudaStream_t stream);

// The unfused twin of the gather fusion: gather kernel into scratch.gathered_b, then the plain
// wgrad. Without gather_index it is grouped_gemm_wgrad itself.
struct GroupedGemmWgradUnfusedScratch {
  TensorView gathered_b;  // [M_cap, N_out] bf16, needed iff args.gather_index is set
};
void grouped_gemm_wgrad_unfused(const GroupedGemmWgradArgs& args,
                                const GroupedGemmWgradUnfusedScratch& scratch,
                                cudaStream_t stream);
void validate_grouped_gemm_wgrad(const GroupedGemmWgradArgs& args);

}  // namespace moefuse
