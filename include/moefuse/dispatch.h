// Token dispatch on the GPU: expert offsets, the permutation maps, permute (gather x into
// expert-contiguous rows), combine (weighted gather-sum back to tokens) and their backward.
// They produce exactly the reference's results (src/ref/dispatch.h): maps and offsets bitwise,
// data within bf16 rounding of an fp32-accumulated sum. docs/dispatch.md has the algorithms.
//
// Order of the rows: the T·k assignments (t, j) are placed expert by expert; inside an expert by
// increasing t (then j). offsets[e] is expert e's first row; every expert's segment is padded to
// a multiple of `align` (default 1: no padding), so offsets[E] = Σ round_up(count_e, align).
// Maps: row_of [T, k] (row of assignment (t, j)); token_of_row [R] (token of a row, -1 for a
// padding row or a row past offsets[E]). token_of_row doubles as the FC1 GEMM's gather_index.
//
// Conventions of every call here:
// - Contiguous device views (Device::kCuda). x, xs, ys, y, dy, dys, dx are bf16 with
//   H % 8 == 0 (16-byte rows); probs, d_probs fp32; indices, maps and offsets int32.
// - R (rows of xs/ys/dys and of token_of_row) is the caller's worst case, e.g.
//   T·k + E·(align - 1); the real extent offsets[E] stays on the device.
// - Arguments are validated before any CUDA call; a bad one throws InvalidArgument naming it.
// - Work is enqueued on `stream` only; nothing allocates, synchronises or reads device memory on
//   the host; results never depend on the order of atomics (bitwise repeatable).
// - health: an optional [1] int32 device flag (moefuse/health.h); an empty view disables it.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "moefuse/tensor.h"
#include "moefuse/workspace.h"

namespace moefuse {

inline constexpr int64_t kDispatchMaxExperts = 1024;
inline constexpr int64_t kDispatchMaxTopK = 16;

// offsets [E+1] int32 from counts [E] int32: exclusive scan of round_up(counts, align).
// E in 1..kDispatchMaxExperts. CUDA-graph safe: yes.
void expert_offsets(const TensorView& counts, const TensorView& offsets, int64_t align,
                    cudaStream_t stream);

struct DispatchMaps {
  TensorView offsets;       // [E+1] int32
  TensorView row_of;        // [T, k] int32 (-1 for an assignment whose expert is out of range)
  TensorView token_of_row;  // [R] int32
};

size_t dispatch_maps_workspace_size(int64_t tokens, int64_t num_experts);

// From expert_idx [T, k] int32 (k in 1..kDispatchMaxTopK) writes offsets, row_of and
// token_of_row for E = num_experts. Counting and placement are atomic-free in their order: a
// per-token-chunk histogram, a scan over (chunk, expert) pairs, then in each chunk a stable
// warp-match ranking (docs/dispatch.md). An expert index outside [0, E) sets
// kHealthExpertOutOfRange and that assignment gets no row (row_of -1); padded rows beyond R set
// kHealthRowsOverflow and are not written. CUDA-graph safe: yes.
void dispatch_maps(const TensorView& expert_idx, int64_t num_experts, int64_t align,
                   const DispatchMaps& maps, const TensorView& health, Workspace workspace,
                   cudaStream_t stream);

// xs [R, H] bf16: xs[row_of[t, j]] = x[t] for every assignment, zeros in every row whose
// token_of_row is -1. Each x row is read once into shared memory and bulk-copied to its k rows.
// CUDA-graph safe: yes.
void permute(const TensorView& x, const TensorView& row_of, const TensorView& token_of_row,
             const TensorView& xs, const TensorView& health, cudaStream_t stream);

// permute fused with the blockwise FP8 quantisation of the activations (DeepSeek-V3 recipe), in
// the layout the FP8 grouped GEMM reads as its A operand (moefuse/grouped_gemm_fp8.h):
//   xs_fp8    [R, H] e4m3: xs_fp8[row_of[t, j]] = E4M3 codes of x[t] in 1x128 groups along H
//   xs_scales [ceil(H/128), fp8_scale_rows(R)] fp32, K-major: entry [g, r] scales
//             xs_fp8[r, 128g .. 128g+127]
// Codes and scales are bit for bit those of quantize_fp8_blockwise_1x128 (moefuse/quant.h) of
// x[t] (scale amax / 448; an all-zero group has scale 1 and zero codes; a short last group when
// H % 128 != 0; NaN and Inf as that quantiser has them), with the scales transposed by
// transpose_fp8_activation_scales. Rows whose token_of_row is -1 are quantised zero rows: zero
// codes and scale 1; the scale columns [R, fp8_scale_rows(R)) are set to 1 too, so every output
// byte is written. Each x row is read once and quantised once (k stores of the code row).
// H must be a multiple of 16 (16-byte code rows); xs_fp8 and xs_scales 16-byte aligned.
// CUDA-graph safe: yes.
void permute_quantize_fp8(const TensorView& x, const TensorView& row_of,
                          const TensorView& token_of_row, const TensorView& xs_fp8,
                          const TensorView& xs_scales, const TensorView& health,
                          cudaStream_t stream);

// permute fused with the FP8 row records of the FP8 dispatch (formats/fp8_row_record.h):
// records[row_of[t, j]] = x[t]'s record (the E4M3 codes of its 1x128 groups, their fp32 scales,
// zero padding), each row's codes and scales those of permute_quantize_fp8. Rows whose
// token_of_row is -1 are zero bytes. records [R, fp8_record_bytes(H)] uint8 (moefuse/dtype.h
// kUInt8), 16-byte aligned; H a multiple of 16. CUDA-graph safe: yes.
void permute_quantize_fp8_records(const TensorView& x, const TensorView& row_of,
                                  const TensorView& token_of_row, const TensorView& records,
                                  const TensorView& health, cudaStream_t stream);

// dx [T, H] bf16 = Σ_j dxs[row_of[t, j]] (fp32 accumulation in j order). CUDA-graph safe: yes.
void permute_backward(const TensorView& dxs, const TensorView& row_of, const TensorView& dx,
                      const TensorView& health, cudaStream_t stream);

// y [T, H] bf16 = Σ_j probs[t, j] · ys[row_of[t, j]] (fp32 accumulation in j order; gather, no
// atomics). probs [T, k] fp32, or an empty view when the FC2 epilogue already applied the
// weights (then y = Σ_j ys[row_of[t, j]]). Rows of -1 contribute nothing. CUDA-graph safe: yes.
void combine(const TensorView& ys, const TensorView& probs, const TensorView& row_of,
             const TensorView& y, const TensorView& health, cudaStream_t stream);

// combine and permute_backward with a term added to each token's fp32 sum before its one
// rounding: y = Σ_j probs[t, j] · ys[row_of[t, j]] + add[t], dx = Σ_j dxs[...] + add[t].
// add [T, H] bf16 (the MoE layer's: a shared expert's output, or its dx): y (dx) itself, or
// memory apart from it; an empty view adds nothing. One pass over [T, H] instead of combine and
// then an add. CUDA-graph safe: yes.
void combine_add(const TensorView& ys, const TensorView& probs, const TensorView& row_of,
                 const TensorView& add, const TensorView& y, const TensorView& health,
                 cudaStream_t stream);
void permute_backward_add(const TensorView& dxs, const TensorView& row_of, const TensorView& add,
                          const TensorView& dx, const TensorView& health, cudaStream_t stream);

// permute_backward_add with the router's share of dx added in the same pass: dx[t] = Σ_j
// dxs[row_of[t, j]] + add[t] + bf16(d_logits[t]) · w_router (the product in fp32 on the tensor
// cores, the whole sum rounded once), so that the router's dx is never written and read back.
// d_logits [T, E] fp32 (1 <= E <= kRouterMaxExperts, moefuse/router.h), w_router [E, H] bf16,
// 16-byte aligned; router_logits_backward with an empty dx does the rest of the router's
// backward (dWr). add as permute_backward_add's. CUDA-graph safe: yes.
void permute_backward_router(const TensorView& dxs, const TensorView& row_of,
                             const TensorView& add, const TensorView& d_logits,
                             const TensorView& w_router, const TensorView& dx,
                             const TensorView& health, cudaStream_t stream);

// Backward of combine. With probs [T, k]: dys[row_of[t, j]] = probs[t, j] · dy[t] and
// d_probs [T, k] fp32 = <dy[t], ys[row_of[t, j]]> (fp32 accumulation, fixed reduction tree).
// With probs and d_probs empty (weights applied by FC2; the FC2 dgrad computes d_probs):
// dys[row_of[t, j]] = dy[t], and ys may be empty too. Rows whose token_of_row is -1 get zeros.
// CUDA-graph safe: yes.
void combine_backward(const TensorView& dy, const TensorView& ys, const TensorView& probs,
                      const TensorView& row_of, const TensorView& token_of_row,
                      const TensorView& dys, const TensorView& d_probs, const TensorView& health,
                      cudaStream_t stream);

}  // namespace moefuse
