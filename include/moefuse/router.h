// The router on the GPU: logits GEMM, fused top-k gating with aux/z-loss statistics, and their
// backward. The math, the weights, the losses and the tie rule are those of the CPU reference
// (src/ref/router.h): experts rank by selection score, higher first, equal scores lower expert
// index first; groups rank the same way by group score. docs/dispatch.md has the algorithms.
//
// Conventions of every call here:
// - Tensors are contiguous device views (Device::kCuda); shapes below use T tokens, H hidden,
//   E experts (1..kRouterMaxExperts), k = top_k (1..min(E, kRouterMaxTopK)).
// - Arguments are validated before any CUDA call; a bad one throws InvalidArgument naming it.
// - Work is enqueued on `stream` only; nothing allocates, nothing synchronises, nothing on the
//   host reads device memory. Scratch comes from a caller-owned workspace whose size the
//   matching *_workspace_size function returns (pass at least that many bytes, 256-byte aligned).
// - health: an optional [1] int32 device flag (moefuse/health.h); an empty view disables it.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "moefuse/config.h"
#include "moefuse/tensor.h"
#include "moefuse/workspace.h"

namespace moefuse {

inline constexpr int64_t kRouterMaxExperts = 512;
inline constexpr int64_t kRouterMaxTopK = 16;
inline constexpr int kRouterMaxGroups = 32;

// ---- Logits GEMM (cuBLAS) ------------------------------------------------------------------
// `cublas` is the caller's handle, created once outside any graph capture; each call binds it to
// `stream` and to the workspace (cublasSetWorkspace), which makes the GEMM capture safe.

size_t router_logits_workspace_size();

// logits [T, E] fp32 = x [T, H] bf16 · w_router [E, H] bf16 ᵀ, fp32 accumulation.
// CUDA-graph safe: yes.
void router_logits(cublasHandle_t cublas, const TensorView& x, const TensorView& w_router,
                   const TensorView& logits, Workspace workspace, cudaStream_t stream);

size_t router_logits_backward_workspace_size(int64_t tokens, int64_t num_experts);

// dx [T, H] bf16 += d_logits · w_router and d_w_router [E, H] fp32 = d_logitsᵀ · x (+=, the
// old value added once to the new sum, with accumulate_d_w_router: main-grad accumulation), with
// d_logits [T, E] fp32 rounded to bf16 first (both GEMMs run bf16 x bf16 with fp32 accumulation;
// dx is read, accumulated in fp32 and written back as bf16). dWr's sum over T runs in chunks of
// T when that fills the GPU (fp32 partials, added in a fixed order: repeatable). An empty dx
// skips its GEMM: the caller adds the term itself (permute_backward_router, moefuse/dispatch.h,
// adds it inside the pass that writes dx). CUDA-graph safe: yes.
void router_logits_backward(cublasHandle_t cublas, const TensorView& x, const TensorView& w_router,
                            const TensorView& d_logits, const TensorView& dx,
                            const TensorView& d_w_router, Workspace workspace,
                            cudaStream_t stream, bool accumulate_d_w_router = false);

// ---- Fused top-k gating ----------------------------------------------------------------------

struct RouterOutputs {
  TensorView expert_idx;  // [T, k] int32: chosen experts in rank order
  TensorView probs;       // [T, k] fp32: routing weights (renormalised, scaled)
  TensorView counts;      // [E] int32: assignments per expert
  TensorView aux_f;       // [E] fp32: f_i = counts_i / (T k)   (0 when T == 0)
  TensorView aux_P;       // [E] fp32: P_i = mean_t q[t, i]       (0 when T == 0)
  TensorView losses;      // [2] fp32: {aux_loss, z_loss}, coefficients included
};

size_t router_topk_workspace_size(int64_t tokens, int64_t num_experts);

// From logits [T, E] fp32 (and score_bias [E] fp32 when options.use_score_bias, else an empty
// view) writes every RouterOutputs field. Softmax router: selection on the logits (the same order
// as on softmax(logits)), fp32 math. Sigmoid router: sigmoid scores, biased selection scores and
// group scores in fp64, as the reference, so that selections match it exactly. Losses are reduced
// in a fixed order (per-block partials, then one fixed tree): outputs are bitwise repeatable.
// Non-finite logits set kHealthNonFiniteLogit. CUDA-graph safe: yes.
void router_topk(const RouterOptions& options, int64_t top_k, const TensorView& logits,
                 const TensorView& score_bias, const RouterOutputs& out, const TensorView& health,
                 Workspace workspace, cudaStream_t stream);

// d_logits [T, E] fp32 from d_probs [T, k] fp32 plus the aux- and z-loss gradients, given the
// forward's logits, expert_idx and counts. loss_grads: the losses' upstream gradient
// ∂L/∂{aux_loss, z_loss}, [2] fp32 in device memory (read by the kernel, never by the host, so a
// captured graph takes the values on the stream at replay: autograd's, 0 when the losses are not
// used), or empty: both 1 (each loss enters the total with weight 1). fp32 math. CUDA-graph safe:
// yes.
void router_topk_backward(const RouterOptions& options, int64_t top_k, const TensorView& logits,
                          const TensorView& expert_idx, const TensorView& counts,
                          const TensorView& d_probs, const TensorView& loss_grads,
                          const TensorView& d_logits, cudaStream_t stream);

}  // namespace moefuse
