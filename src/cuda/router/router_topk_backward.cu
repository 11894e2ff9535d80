// Router backward to the logits: one warp per token, recomputing softmax (and sigmoid) from the
// logits. Per token, with r the routing score (p or s), c the scaling factor, S = Σ_j r[idx_j]:
//   d_score[idx_j] = renormalize ? c·(g_j − Σ_i w_i g_i) / S : c·g_j,   w_i = r[idx_i] / S
//   aux: dq_e = γ_aux·α·E·f_e / T (one value per expert, staged in shared memory)
//   softmax: dl = p ⊙ (u − <u, p>),  u = d_score + dq
//   sigmoid: dl = (d_score + (dq − <dq, q>)/Σs) ⊙ s ⊙ (1 − s),  q = s/Σs
//   z:       dl += 2γ_z·β·lse/T · p
// α, β: the losses' coefficients; γ: their upstream gradients (loss_grads, read here from device
// memory; 1 without them).
// Each centring x_j − Σ_i w_i x_i (Σ w = 1) is evaluated anchored at a, the index of the largest
// weight, as (x_j − x_a) + Σ_i w_i (x_a − x_i). In exact arithmetic that is the same; in fp32 the
// plain form cancels when one weight is near 1 (a router sure of one expert): x_a − <x, w> is then
// the difference of two near-equal numbers and kept ~3% of its value (fuzz run 10, softmax top-13
// of 17 with p ≈ 1 − 1e-6). Anchored, the small result is summed from small terms. At top_k 1
// with renormalisation it is exactly 0, as it must be: the weight is 1 whatever the logits.
// fp32 math, fixed butterfly reductions: bitwise repeatable.
#include <cuda_runtime.h>

#include <cmath>

#include "cuda/check.h"
#include "cuda/device.h"
#include "cuda/router/router_args.h"
#include "cuda/router/warp_select.cuh"
#include "moefuse/router.h"

namespace moefuse {
namespace cuda {
namespace {

constexpr int kWarps = 8;

struct BackwardParams {
  const float* logits;
  const int32_t* expert_idx;
  const int32_t* counts;
  const float* d_probs;
  const float* loss_grads;  // [2] {aux, z}, or null: 1 and 1
  float* d_logits;
  int tokens, experts, top_k;
  bool sigmoid, renormalize;
  float scale, aux_coeff, z_coeff;
};

template <int S>
__global__ void __launch_bounds__(kWarps * 32) router_topk_backward_kernel(BackwardParams p) {
  extern __shared__ float s_dq[];  // [E]
  const int E = p.experts, k = p.top_k;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const float aux_coeff = p.loss_grads ? p.aux_coeff * p.loss_grads[0] : p.aux_coeff;
  const float z_coeff = p.loss_grads ? p.z_coeff * p.loss_grads[1] : p.z_coeff;
  for (int e = threadIdx.x; e < E; e += blockDim.x) {
    const double f = static_cast<double>(p.counts[e]) / (static_cast<double>(p.tokens) * k);
    s_dq[e] = static_cast<float>(static_cast<double>(aux_coeff) * E * f / p.tokens);
  }
  __syncthreads();
  const int t = blockIdx.x * kWarps + warp;
  if (t >= p.tokens) return;

  const float* row = p.logits + static_cast<int64_t>(t) * E;
  float v[S], prob[S], score[S], dq[S], d_score[S];
  float m = -INFINITY;
#pragma unroll
  for (int i = 0; i < S; ++i) {
    const int e = i * 32 + lane;
    v[i] = e < E ? row[e] : -INFINITY;
    dq[i] = e < E ? s_dq[e] : 0.0f;
    d_score[i] = 0;
    m = fmaxf(m, v[i]);
  }
  m = warp_max(m);
  float sum_exp = 0;
#pragma unroll
  for (int i = 0; i < S; ++i) {
    prob[i] = i * 32 + lane < E ? expf(v[i] - m) : 0.0f;
    sum_exp += prob[i];
  }
  sum_exp = warp_sum(sum_exp);
  const float lse = m + logf(sum_exp);
#pragma unroll
  for (int i = 0; i < S; ++i) {
    prob[i] /= sum_exp;
    score[i] = !p.sigmoid ? prob[i] : (i * 32 + lane < E ? 1.0f / (1.0f + expf(-v[i])) : 0.0f);
  }

  // Lane j holds assignment j; the score of its expert comes from the owning lane. Sums in j
  // order, as the reference.
  const int64_t at = static_cast<int64_t>(t) * k + lane;
  const int my_e = lane < k ? p.expert_idx[at] : 0;
  const float my_g = lane < k ? p.d_probs[at] : 0.0f;
  // Lane j also fetches the score of its own expert: r_j.
  float my_r = 0;
  for (int j = 0; j < k; ++j) {
    const int e = __shfl_sync(kFullMask, my_e, j);
    float r = 0;
#pragma unroll
    for (int i = 0; i < S; ++i)
      if (i * 32 + lane == e) r = score[i];
    r = __shfl_sync(kFullMask, r, e & 31);
    if (lane == j) my_r = r;
  }
  float sum = 0;
  int a = 0;  // the assignment of largest score (lowest j on ties): the renormalisation's anchor
  float r_a = -INFINITY;
  for (int j = 0; j < k; ++j) {
    const float r = __shfl_sync(kFullMask, my_r, j);
    sum += r;
    if (r > r_a) r_a = r, a = j;
  }
  const float g_a = __shfl_sync(kFullMask, my_g, a);
  float centre = 0;  // Σ_i w_i (g_a − g_i)
  for (int j = 0; j < k; ++j)
    centre += (__shfl_sync(kFullMask, my_r, j) / sum) * (g_a - __shfl_sync(kFullMask, my_g, j));
  for (int j = 0; j < k; ++j) {
    const int e = __shfl_sync(kFullMask, my_e, j);
    const float g = __shfl_sync(kFullMask, my_g, j);
    const float ds = p.renormalize ? p.scale * ((g - g_a) + centre) / sum : p.scale * g;
#pragma unroll
    for (int i = 0; i < S; ++i)
      if (i * 32 + lane == e) d_score[i] += ds;
  }

  // The expert of largest logit (lowest index on ties) anchors the softmax's and the aux term's
  // centring: it has the largest p, and the largest s.
  unsigned mine = ~0u;
#pragma unroll
  for (int i = S - 1; i >= 0; --i)
    if (i * 32 + lane < E && v[i] == m) mine = i * 32 + lane;
  const unsigned top = __reduce_min_sync(kFullMask, mine);
  const auto at_top = [&](const float(&x)[S]) {
    float x_top = 0;
#pragma unroll
    for (int i = 0; i < S; ++i)
      if (i * 32 + lane == top) x_top = x[i];
    return __shfl_sync(kFullMask, x_top, top & 31);  // 0 when no logit equals m (NaN logits)
  };

  float dl[S];
  if (!p.sigmoid) {
    float u[S];
#pragma unroll
    for (int i = 0; i < S; ++i) u[i] = d_score[i] + dq[i];
    const float u_top = at_top(u);
    float c = 0;  // Σ_i p_i (u_top − u_i)
#pragma unroll
    for (int i = 0; i < S; ++i) c += prob[i] * (u_top - u[i]);
    c = warp_sum(c);
#pragma unroll
    for (int i = 0; i < S; ++i) dl[i] = prob[i] * ((u[i] - u_top) + c);
  } else {
    const float dq_top = at_top(dq);
    float s_sum = 0, c = 0;  // c: Σ_i s_i (dq_top − dq_i), divided by Σs below
#pragma unroll
    for (int i = 0; i < S; ++i) s_sum += score[i], c += score[i] * (dq_top - dq[i]);
    s_sum = warp_sum(s_sum);
    c = warp_sum(c) / s_sum;
#pragma unroll
    for (int i = 0; i < S; ++i) {
      // 1 − s as σ(−v), not 1 − σ(v): the latter is 0 or a few ulps when s is near 1.
      const float one_minus_s = 1.0f / (1.0f + expf(v[i]));
      dl[i] = (d_score[i] + ((dq[i] - dq_top) + c) / s_sum) * score[i] * one_minus_s;
    }
  }
  const float dz = 2.0f * z_coeff * lse / static_cast<float>(p.tokens);
  float* out = p.d_logits + static_cast<int64_t>(t) * E;
#pragma unroll
  for (int i = 0; i < S; ++i)
    if (i * 32 + lane < E) out[i * 32 + lane] = dl[i] + dz * prob[i];
}

template <int S>
void launch_backward(const BackwardParams& p, cudaStream_t stream) {
  const unsigned blocks = static_cast<unsigned>((p.tokens + kWarps - 1) / kWarps);
  router_topk_backward_kernel<S><<<blocks, kWarps * 32, sizeof(float) * p.experts, stream>>>(p);
  MOEFUSE_CUDA_CHECK_LAUNCH();
}

}  // namespace
}  // namespace cuda

void router_topk_backward(const RouterOptions& options, int64_t top_k, const TensorView& logits,
                          const TensorView& expert_idx, const TensorView& counts,
                          const TensorView& d_probs, const TensorView& loss_grads,
                          const TensorView& d_logits, cudaStream_t stream) {
  const cuda::RouterShape shape = cuda::check_router_topk_backward(
      options, top_k, logits, expert_idx, counts, d_probs, loss_grads, d_logits);
  cuda::expect_launchable(stream);
  if (shape.tokens == 0) return;
  const cuda::BackwardParams p{
      .logits = logits.as<const float>(),
      .expert_idx = expert_idx.as<const int32_t>(),
      .counts = counts.as<const int32_t>(),
      .d_probs = d_probs.as<const float>(),
      .loss_grads = is_absent(loss_grads) ? nullptr : loss_grads.as<const float>(),
      .d_logits = d_logits.as<float>(),
      .tokens = static_cast<int>(shape.tokens),
      .experts = static_cast<int>(shape.experts),
      .top_k = static_cast<int>(top_k),
      .sigmoid = options.kind == RouterKind::kSigmoidGroupTopK,
      .renormalize = options.renormalize,
      .scale = options.routed_scaling_factor,
      .aux_coeff = options.aux_loss_coeff,
      .z_coeff = options.z_loss_coeff,
  };
  if (shape.experts <= 32) {
    cuda::launch_backward<1>(p, stream);
  } else if (shape.experts <= 128) {
    cuda::launch_backward<4>(p, stream);
  } else {
    cuda::launch_backward<16>(p, stream);
  }
}

}  // namespace moefuse
