// The fused router kernel (one warp per token) and the fixed-order reduction of its loss
// statistics. Protocol, per call:
//   1. router_topk_kernel, a persistent grid of G blocks: warp w of block b takes tokens
//      b·W + w, then every G·W-th. Per token: softmax statistics (max, Σexp, lse) in fp32, the
//      selection keys (softmax: the logit; sigmoid: fp64 sigmoid + bias, group-limited), k rounds
//      of warp arg-max, the weights. Per block: the expert histogram (shared-memory integer adds),
//      the Σ_t q[t, e] partials (registers, then warps summed in warp order) and Σ lse², written
//      to workspace slot b. Block 0 also zeroes the ticket the next kernel counts with.
//   2. router_finalize_kernel, ceil(E/32) blocks of 32×32 threads: sums the G partials per expert
//      in a fixed tree, writes counts, f, P; the last block to finish (ticket) sums the per-block
//      Σ f·P and the Σ lse² partials in a fixed tree into the two losses.
// No floating-point atomics anywhere, so every output is bitwise repeatable for a given T and
// device (G depends on the SM count).
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <string>

#include "cuda/check.h"
#include "cuda/device.h"
#include "cuda/router/checks.h"
#include "cuda/router/router_args.h"
#include "cuda/router/warp_select.cuh"
#include "cuda/sm_count.h"
#include "moefuse/health.h"
#include "moefuse/router.h"

namespace moefuse {
namespace cuda {
namespace {

constexpr int kWarps = 8;               // tokens in flight per block
constexpr int kMaxBlocks = 1024;        // cap of the persistent grid (sizes the workspace)
constexpr int kBlocksPerSm = 4;

struct TopkParams {
  const float* logits;
  const float* bias;  // nullptr: no selection bias
  int tokens, experts, top_k;
  bool sigmoid, renormalize;
  double scale;
  int num_groups, topk_groups;
  int32_t* expert_idx;
  float* probs;
  int32_t* partial_counts;  // [G, E]
  float* partial_P;         // [G, E]
  double* partial_z;        // [G]
  unsigned* ticket;
  int32_t* health;
};

struct FinalizeParams {
  int tokens, experts, top_k, blocks;  // blocks: G of the top-k kernel
  double aux_coeff, z_coeff;
  const int32_t* partial_counts;
  const float* partial_P;
  const double* partial_z;
  double* partial_fp;  // [ceil(E/32)]
  unsigned* ticket;
  int32_t* counts;
  float* aux_f;
  float* aux_P;
  float* losses;
};

struct Layout {
  int blocks;  // G
  size_t counts_off, P_off, z_off, fp_off, ticket_off, total;
};

Layout workspace_layout(int64_t tokens, int64_t experts, int blocks) {
  Layout l{.blocks = blocks};
  size_t off = 0;
  auto take = [&](size_t bytes) {
    const size_t at = off;
    off += align_bytes(bytes);
    return at;
  };
  l.counts_off = take(sizeof(int32_t) * blocks * experts);
  l.P_off = take(sizeof(float) * blocks * experts);
  l.z_off = take(sizeof(double) * blocks);
  l.fp_off = take(sizeof(double) * ((experts + 31) / 32));
  l.ticket_off = take(sizeof(unsigned));
  l.total = off;
  (void)tokens;
  return l;
}

int max_blocks(int64_t tokens) {
  return static_cast<int>(std::clamp<int64_t>((tokens + kWarps - 1) / kWarps, 1, kMaxBlocks));
}

// Restricts the keys to the best `topk_groups` groups (group score: sum of the two best biased
// scores of the group, decoded back to fp64 and added best + second, as the reference).
template <int S>
__device__ void restrict_to_groups(uint64_t (&key)[S], const TopkParams& p, int lane) {
  const int per = p.experts / p.num_groups;
  uint64_t my_group_key = kNoCandidateKey;  // lane g holds group g's
  for (int g = 0; g < p.num_groups; ++g) {
    uint64_t b1 = kNoCandidateKey, b2 = kNoCandidateKey;
    unsigned i1 = ~0u;
#pragma unroll
    for (int i = 0; i < S; ++i) {
      const int e = i * 32 + lane;
      if (e >= p.experts || e / per != g) continue;
      if (key[i] > b1) {
        b2 = b1, b1 = key[i], i1 = e;
      } else if (key[i] > b2) {
        b2 = key[i];
      }
    }
    const ArgMax<uint64_t> first = warp_argmax(b1, i1);
    const ArgMax<uint64_t> second = warp_argmax(i1 == first.index ? b2 : b1, 0);
    const double score = key_value(first.key) + key_value(second.key);
    if (lane == g) my_group_key = ordered_key(score);
  }
  unsigned chosen = 0;
  for (int r = 0; r < p.topk_groups; ++r) {
    const bool open = lane < p.num_groups && !((chosen >> lane) & 1u);
    chosen |= 1u << warp_argmax(open ? my_group_key : kNoCandidateKey, lane).index;
  }
#pragma unroll
  for (int i = 0; i < S; ++i) {
    const int e = i * 32 + lane;
    if (e < p.experts && !((chosen >> (e / per)) & 1u)) key[i] = kNoCandidateKey;
  }
}

// Lane `lane`'s best key among its S slots and that expert (kNoCandidateKey and ~0u: none left).
// Strict comparison: of equal keys the lower slot, i.e. the lower expert index, wins.
template <class Key, int S>
__device__ __forceinline__ ArgMax<Key> lane_best(const Key (&key)[S], int lane) {
  ArgMax<Key> best{.key = Key{kNoCandidateKey}, .index = ~0u};
#pragma unroll
  for (int i = 0; i < S; ++i)
    if (key[i] > best.key) best = {.key = key[i], .index = static_cast<unsigned>(i * 32 + lane)};
  return best;
}

// k rounds of arg-max over the lanes' best keys; returns the r-th choice on lane r (~0u on the
// others, and for a round that found no candidate). Only the lane whose key was taken looks for
// its next best, and no weight is computed inside the rounds. Key: ordered_key32 (softmax) or
// ordered_key (sigmoid) keys.
template <class Key, int S>
__device__ __forceinline__ unsigned select_top_k(Key (&key)[S], int top_k, int lane) {
  ArgMax<Key> mine = lane_best(key, lane);
  unsigned my_idx = ~0u;
  for (int r = 0; r < top_k; ++r) {
    const ArgMax<Key> a = warp_argmax(mine.key, mine.index);
    if (lane == r) my_idx = a.index;
    if (lane == static_cast<int>(a.index & 31u)) {
#pragma unroll
      for (int i = 0; i < S; ++i)
        key[i] = i == static_cast<int>(a.index >> 5) ? Key{kNoCandidateKey} : key[i];
      mine = lane_best(key, lane);
    }
  }
  return my_idx;
}

// S: expert slots per lane (E <= 32·S); lane l holds experts l, l+32, ... (coalesced loads).
template <int S>
__global__ void __launch_bounds__(kWarps * 32) router_topk_kernel(TopkParams p) {
  extern __shared__ double smem[];
  double* s_z = smem;                                         // [W]
  float* s_P = reinterpret_cast<float*>(s_z + kWarps);        // [W, E]
  int* s_hist = reinterpret_cast<int*>(s_P + kWarps * p.experts);  // [E]
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int E = p.experts;
  for (int e = threadIdx.x; e < E; e += blockDim.x) s_hist[e] = 0;
  if (blockIdx.x == 0 && threadIdx.x == 0) *p.ticket = 0;
  __syncthreads();

  float p_acc[S] = {};
  double z_acc = 0;
  bool bad = false;
  for (int t = blockIdx.x * kWarps + warp; t < p.tokens; t += gridDim.x * kWarps) {
    const float* row = p.logits + static_cast<int64_t>(t) * E;
    float v[S];
    float m = -INFINITY;
#pragma unroll
    for (int i = 0; i < S; ++i) {
      const int e = i * 32 + lane;
      v[i] = e < E ? row[e] : -INFINITY;
      bad |= e < E && !isfinite(v[i]);
      m = fmaxf(m, v[i]);
    }
    m = warp_max(m);
    float ex[S];
    float sum_exp = 0;
#pragma unroll
    for (int i = 0; i < S; ++i) {
      ex[i] = i * 32 + lane < E ? expf(v[i] - m) : 0.0f;
      sum_exp += ex[i];
    }
    sum_exp = warp_sum(sum_exp);
    const float lse = m + logf(sum_exp);
    if (lane == 0) z_acc += static_cast<double>(lse) * lse;

    unsigned my_idx;
    if (!p.sigmoid) {
      const float inv_sum = __frcp_rn(sum_exp);
      uint32_t key[S];
#pragma unroll
      for (int i = 0; i < S; ++i) {
        key[i] = i * 32 + lane < E ? ordered_key32(v[i]) : uint32_t{kNoCandidateKey};
        p_acc[i] += ex[i] * inv_sum;
      }
      my_idx = select_top_k(key, p.top_k, lane);
    } else {
      uint64_t key[S];
      float s32[S];
      float sum_s = 0;
#pragma unroll
      for (int i = 0; i < S; ++i) {
        const int e = i * 32 + lane;
        key[i] = kNoCandidateKey;
        s32[i] = 0;
        if (e < E) {
          const double s = 1.0 / (1.0 + exp(-static_cast<double>(v[i])));
          double sel = s;
          if (p.bias) {
            const float b = p.bias[e];
            bad |= !isfinite(b);
            sel += static_cast<double>(b);
          }
          key[i] = ordered_key(sel);
          s32[i] = static_cast<float>(s);
        }
        sum_s += s32[i];
      }
      sum_s = warp_sum(sum_s);
#pragma unroll
      for (int i = 0; i < S; ++i) p_acc[i] += s32[i] / sum_s;
      if (p.num_groups > 1) restrict_to_groups(key, p, lane);
      my_idx = select_top_k(key, p.top_k, lane);
    }

    // Each choice's weight in fp64 as the reference, from its logit read again (the expression
    // the scores came from, on the same value), summed in choice order. A choice of none (~0u,
    // fewer candidates than k) weighs 0.
    double my_w = 0;
    if (lane < p.top_k && my_idx < static_cast<unsigned>(E)) {
      const float l = row[my_idx];
      my_w = p.sigmoid ? 1.0 / (1.0 + exp(-static_cast<double>(l)))
                       : static_cast<double>(expf(l - m) / sum_exp);
    }
    double w_sum = 0;
    for (int r = 0; r < p.top_k; ++r) w_sum += __shfl_sync(kFullMask, my_w, r);
    if (lane < p.top_k) {
      double w = my_w;
      if (p.renormalize) w /= w_sum;
      const int64_t at = static_cast<int64_t>(t) * p.top_k + lane;
      p.probs[at] = static_cast<float>(w * p.scale);
      p.expert_idx[at] = static_cast<int32_t>(my_idx);
      atomicAdd(&s_hist[my_idx], 1);  // integer adds: the count does not depend on their order
    }
  }
  if (__any_sync(kFullMask, bad) && lane == 0 && p.health)
    atomicOr(p.health, kHealthNonFiniteLogit);

#pragma unroll
  for (int i = 0; i < S; ++i)
    if (i * 32 + lane < E) s_P[warp * E + i * 32 + lane] = p_acc[i];
  if (lane == 0) s_z[warp] = z_acc;
  __syncthreads();
  for (int e = threadIdx.x; e < E; e += blockDim.x) {
    float sum = 0;
    for (int w = 0; w < kWarps; ++w) sum += s_P[w * E + e];
    p.partial_P[static_cast<int64_t>(blockIdx.x) * E + e] = sum;
    p.partial_counts[static_cast<int64_t>(blockIdx.x) * E + e] = s_hist[e];
  }
  if (threadIdx.x == 0) {
    double z = 0;
    for (int w = 0; w < kWarps; ++w) z += s_z[w];
    p.partial_z[blockIdx.x] = z;
  }
}

__global__ void __launch_bounds__(1024) router_finalize_kernel(FinalizeParams p) {
  __shared__ double s_P[32][33];
  __shared__ long long s_c[32][33];
  __shared__ bool is_last;
  const int tx = threadIdx.x, ty = threadIdx.y;
  const int e = blockIdx.x * 32 + tx;
  double P = 0;
  long long c = 0;
  if (e < p.experts) {
    for (int b = ty; b < p.blocks; b += 32) {
      P += p.partial_P[static_cast<int64_t>(b) * p.experts + e];
      c += p.partial_counts[static_cast<int64_t>(b) * p.experts + e];
    }
  }
  s_P[ty][tx] = P;
  s_c[ty][tx] = c;
  __syncthreads();
  if (ty == 0) {
    double P_sum = 0;
    long long count = 0;
    for (int y = 0; y < 32; ++y) P_sum += s_P[y][tx], count += s_c[y][tx];
    double fp = 0;
    if (e < p.experts) {
      const bool any = p.tokens > 0;
      const double f = any ? static_cast<double>(count) / (static_cast<double>(p.tokens) * p.top_k) : 0;
      const double P_mean = any ? P_sum / p.tokens : 0;
      p.counts[e] = static_cast<int32_t>(count);
      p.aux_f[e] = static_cast<float>(f);
      p.aux_P[e] = static_cast<float>(P_mean);
      fp = f * P_mean;
    }
    fp = warp_sum(fp);
    if (tx == 0) p.partial_fp[blockIdx.x] = fp;
  }
  // The last block to arrive sums the per-block terms: thread i (of 1024) the terms i, i + 1024,
  // ..., then a fixed tree over the threads. Which block is last does not change the result.
  // (One thread summing the G ≈ 4·SMs partials in order took ~10 µs of L2 round trips.)
  __threadfence();
  __syncthreads();
  if (tx == 0 && ty == 0) is_last = atomicAdd(p.ticket, 1u) == gridDim.x - 1;
  __syncthreads();
  if (!is_last) return;
  __threadfence();
  const int tid = ty * 32 + tx;
  double fp_part = 0, z_part = 0;
  for (int b = tid; b < static_cast<int>(gridDim.x); b += 1024)
    fp_part += __ldcg(&p.partial_fp[b]);
  for (int b = tid; b < p.blocks; b += 1024) z_part += __ldcg(&p.partial_z[b]);
  fp_part = warp_sum(fp_part);
  z_part = warp_sum(z_part);
  if (tx == 0) s_P[0][ty] = fp_part, s_P[1][ty] = z_part;  // s_P is free again
  __syncthreads();
  if (ty != 0) return;
  const double fp = warp_sum(s_P[0][tx]), z = warp_sum(s_P[1][tx]);
  if (tx != 0) return;
  const bool any = p.tokens > 0;
  p.losses[0] = any ? static_cast<float>(p.aux_coeff * p.experts * fp) : 0.0f;
  p.losses[1] = any ? static_cast<float>(p.z_coeff * z / p.tokens) : 0.0f;
}

template <int S>
void launch_topk(const TopkParams& p, int blocks, cudaStream_t stream) {
  const size_t smem = sizeof(double) * kWarps + sizeof(float) * kWarps * p.experts +
                      sizeof(int) * p.experts;
  router_topk_kernel<S><<<blocks, kWarps * 32, smem, stream>>>(p);
  MOEFUSE_CUDA_CHECK_LAUNCH();
}

}  // namespace
}  // namespace cuda

size_t router_topk_workspace_size(int64_t tokens, int64_t num_experts) {
  cuda::expect_in_range(tokens, "tokens", 0, INT32_MAX);
  cuda::expect_in_range(num_experts, "num_experts", 1, kRouterMaxExperts);
  return cuda::workspace_layout(tokens, num_experts, cuda::max_blocks(tokens)).total;
}

void router_topk(const RouterOptions& options, int64_t top_k, const TensorView& logits,
                 const TensorView& score_bias, const RouterOutputs& out, const TensorView& health,
                 Workspace workspace, cudaStream_t stream) {
  const cuda::RouterShape shape = cuda::check_router_topk(options, top_k, logits, score_bias, out);
  int32_t* flag = cuda::expect_health(health);
  const int64_t T = shape.tokens, E = shape.experts;
  cuda::expect_workspace(workspace, router_topk_workspace_size(T, E));
  cuda::expect_launchable(stream);

  const int blocks = std::min(cuda::max_blocks(T), cuda::device_sm_count() * cuda::kBlocksPerSm);
  const cuda::Layout l = cuda::workspace_layout(T, E, cuda::max_blocks(T));
  auto* base = static_cast<unsigned char*>(workspace.data);
  const cuda::TopkParams p{
      .logits = logits.as<const float>(),
      .bias = options.use_score_bias ? score_bias.as<const float>() : nullptr,
      .tokens = static_cast<int>(T),
      .experts = static_cast<int>(E),
      .top_k = static_cast<int>(top_k),
      .sigmoid = options.kind == RouterKind::kSigmoidGroupTopK,
      .renormalize = options.renormalize,
      .scale = static_cast<double>(options.routed_scaling_factor),
      .num_groups = options.kind == RouterKind::kSigmoidGroupTopK ? options.num_groups : 1,
      .topk_groups = options.topk_groups,
      .expert_idx = out.expert_idx.as<int32_t>(),
      .probs = out.probs.as<float>(),
      .partial_counts = reinterpret_cast<int32_t*>(base + l.counts_off),
      .partial_P = reinterpret_cast<float*>(base + l.P_off),
      .partial_z = reinterpret_cast<double*>(base + l.z_off),
      .ticket = reinterpret_cast<unsigned*>(base + l.ticket_off),
      .health = flag,
  };
  if (E <= 32) {
    cuda::launch_topk<1>(p, blocks, stream);
  } else if (E <= 128) {
    cuda::launch_topk<4>(p, blocks, stream);
  } else {
    cuda::launch_topk<16>(p, blocks, stream);
  }
  const cuda::FinalizeParams f{
      .tokens = static_cast<int>(T),
      .experts = static_cast<int>(E),
      .top_k = static_cast<int>(top_k),
      .blocks = blocks,
      .aux_coeff = static_cast<double>(options.aux_loss_coeff),
      .z_coeff = static_cast<double>(options.z_loss_coeff),
      .partial_counts = p.partial_counts,
      .partial_P = p.partial_P,
      .partial_z = p.partial_z,
      .partial_fp = reinterpret_cast<double*>(base + l.fp_off),
      .ticket = p.ticket,
      .counts = out.counts.as<int32_t>(),
      .aux_f = out.aux_f.as<float>(),
      .aux_P = out.aux_P.as<float>(),
      .losses = out.losses.as<float>(),
  };
  cuda::router_finalize_kernel<<<static_cast<unsigned>((E + 31) / 32), dim3(32, 32), 0, stream>>>(f);
  MOEFUSE_CUDA_CHECK_LAUNCH();
}

}  // namespace moefuse
