// permute: xs[row_of[t, j]] = x[t], by the TMA engine's bulk copies; permute_quantize_fp8: the
// same with E4M3 codes of x[t] in 1x128 groups (plus their scales, K-major) instead of the bf16
// row; permute_quantize_fp8_records: the codes and scales as one record a row
// (formats/fp8_row_record.h), both staged in shared memory and copied out together.
//
// The copy moves (1 + k)·T·H·2 bytes (each x row read once, written k times) and is write-heavy;
// a warp of 16-byte stores reached only 0.81–0.91 of copy bandwidth (docs/measurements.md, run
// 7), while the read-heavy backward reached 0.90–0.95. Here one thread per block issues
// whole-row bulk copies: x rows into shared memory (cp.async.bulk, completing on an mbarrier),
// then each row to its k destinations (cp.async.bulk shared → global), so the SM's issue slots
// no longer bound the stores and every block keeps a whole group of rows in flight each way.
//
// Persistent grid of one-warp blocks. A block walks token groups g = blockIdx.x + i·gridDim.x
// of `group` tokens through two shared-memory stages of x rows:
//   all lanes:  load group g's row_of entries (the first 32 into registers, so that their
//               latency overlaps lane 0's wait below);
//   lane 0:     if there is a next group: load it into the other stage (copy: first wait until
//               the stores of the previous group have read that stage, cp.async.bulk.wait_group
//               .read 0; quantising: the warp's own reads of it ended before the previous
//               iteration's __syncwarp);
//   all lanes:  classify the entries (health flag for bad rows) into shared memory;
//   copy:       lane 0 waits for group g's load (mbarrier of its stage, one phase per use) and
//               issues group g's stores from the stage;
//   quantising: the codes go through two more stages, code buffer s for group it (s = it % 2):
//               lane 0: wait_group.read 1 — the stores of group it - 2, the last to read code
//                 buffer s, have read it (one bulk group is committed per iteration);
//               all lanes: wait for group g's load (mbarrier), __syncwarp;
//               all lanes: quantise the group's rows into code buffer s (generic-proxy writes)
//                 and store the scales (global stores hinted L2 evict_last, K-major: k per
//                 group per token;
//                 records: into the staged record after the codes, with its zero padding);
//               all lanes: fence.proxy.async.shared::cta (their code writes become visible to
//                 the async proxy), __syncwarp;
//               lane 0: issue group g's code-row stores from code buffer s;
//   lane 0:     commit the group's stores as one bulk group.
// Before that, lane 0 issues the block's first load and the warp zeroes the rows whose
// token_of_row is -1 (padding, rows past offsets[E]) for its share of 32-row chunks;
// quantising, it also sets their scales (and the pitch padding columns) to 1. Session 36 (call
// 6, three rounds): that order, against classifying before the wait and zeroing before the
// first load, 0.899-0.901 → 0.909-0.910 of copy on qwen3, 0.878-0.880 → 0.882-0.883 deepseek,
// 0.881-0.882 → 0.885-0.888 mixtral; the quantising permute -1% on qwen3, +0.5-1.5% elsewhere.
// Each output byte is written by exactly one thread or copy: no atomics, deterministic.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <string>

#include <cute/arch/copy_sm90_tma.hpp>
#include <cutlass/arch/barrier.h>

#include "cuda/check.h"
#include "cuda/device.h"
#include "cuda/dispatch/dispatch_args.h"
#include "cuda/dispatch/permute_tuning.h"
#include "cuda/dispatch/rows.cuh"
#include "cuda/quant/vec16.cuh"
#include "cuda/router/checks.h"
#include "cuda/sm_count.h"
#include "formats/fp8_row_record.h"
#include "formats/recipes.h"
#include "moefuse/dispatch.h"
#include "moefuse/error.h"
#include "moefuse/grouped_gemm_fp8.h"

namespace moefuse {
namespace cuda {
namespace {

using cutlass::arch::ClusterBarrier;
using cutlass::arch::ClusterTransactionBarrier;

constexpr int kStages = 2;
constexpr int kMaxGroupTokens = 8;
// The opt-in limit (227 KiB on Hopper) bounds static + dynamic shared memory together: leave
// 1 KiB for the static part (mbarriers, row indices: ~0.5 KiB), or cudaFuncSetAttribute fails
// instead of the hidden-size check below.
constexpr int64_t kMaxDynamicSmem = 227 * 1024 - 1024;
constexpr int kGroupLanes = formats::kBlockwiseGroup / quant::kVec;  // lanes of a 1x128 group
static_assert(kStages * sizeof(uint64_t) + kMaxGroupTokens * kDispatchMaxTopK * sizeof(int) +
                      128 <=
                  227 * 1024 - kMaxDynamicSmem,
              "permute_kernel's static shared memory (+ the dynamic part's alignment) must fit "
              "the reserve");

struct PermuteParams {
  const uint8_t* x;
  const int32_t* row_of;
  const int32_t* token_of_row;
  uint8_t* out;       // xs (bf16 rows), xs_fp8 (E4M3 code rows) or FP8 row records
  int tokens, top_k, rows;
  int row_bytes;      // x rows: H·2
  int out_row_bytes;  // output rows: H·2, H or fp8_record_bytes(H), a multiple of 16
  int vecs;           // 16-byte vectors of an output row
  int code_vecs;      // quantising: 16-byte vectors of E4M3 codes (= 16-element vectors), H / 16
  int group;          // tokens per group (≤ kMaxGroupTokens)
  int groups;         // ceil(tokens / group)
  int zero_chunks;    // ceil(rows / 32), quantising ceil(scale_pitch / 32)
  int32_t* health;
  float* scales;      // quantising: [scale_groups, scale_pitch] fp32, K-major; records: null
  int scale_groups, scale_pitch;
};

// The copy's bulk copies carry the L2 hint evict_first (kStreaming): each x row is read once
// and each xs row written once. Session 33 (call 8, three interleaved rounds, of copy): gpt-oss
// 0.834 → 0.842-0.847, qwen3 0.88 → 0.90; the loads' hint alone 0.840-0.844, the stores
// hinted evict_last instead 0.80. The quantising variants measured 1% slower with either hint
// and keep none.
constexpr uint64_t kEvictFirst = static_cast<uint64_t>(cute::TMA::CacheHintSm90::EVICT_FIRST);

template <bool kStreaming>
__device__ __forceinline__ void bulk_load(const uint8_t* src, uint64_t* bar, uint8_t* dst,
                                          int bytes) {
  if constexpr (!kStreaming) {
    cute::SM90_BULK_COPY_G2S::copy(src, bar, dst, bytes);
  } else {
    asm volatile(
        "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint"
        " [%0], [%1], %2, [%3], %4;\n" ::"r"(cute::cast_smem_ptr_to_uint(dst)),
        "l"(src), "r"(bytes), "r"(cute::cast_smem_ptr_to_uint(bar)), "l"(kEvictFirst)
        : "memory");
  }
}

template <bool kStreaming>
__device__ __forceinline__ void bulk_store(const uint8_t* src, uint8_t* dst, int bytes) {
  if constexpr (!kStreaming) {
    cute::SM90_BULK_COPY_S2G::copy(src, dst, bytes);
  } else {
    asm volatile(
        "cp.async.bulk.global.shared::cta.bulk_group.L2::cache_hint [%0], [%1], %2, %3;\n" ::"l"(
            dst),
        "r"(cute::cast_smem_ptr_to_uint(src)), "r"(bytes), "l"(kEvictFirst)
        : "memory");
  }
}

// Lane 0: loads the x rows of group g into stage `stage`, completing on `bar`.
template <bool kStreaming>
__device__ __forceinline__ void load_group(const PermuteParams& p, int g, uint8_t* stage,
                                           uint64_t* bar) {
  const int t0 = g * p.group;
  const int n = min(p.group, p.tokens - t0);
  ClusterTransactionBarrier::arrive_and_expect_tx(bar, static_cast<uint32_t>(n * p.row_bytes));
  for (int i = 0; i < n; ++i)
    bulk_load<kStreaming>(p.x + static_cast<int64_t>(t0 + i) * p.row_bytes, bar,
                          stage + i * p.row_bytes, p.row_bytes);
}

// The scales of row r when no token owns it: a row whose token_of_row is -1 is a zero row, so
// it gets an all-zero group's scale (blockwise_scale(0), 1); the pitch padding [R, scale_pitch)
// gets 1 as in transpose_fp8_activation_scales (the GEMM never reads it).
__device__ __forceinline__ void set_unowned_scales(const PermuteParams& p, int r) {
  if (!p.scales) return;  // records: a padding row is all zeros, scales included
  const bool unowned = r < p.rows ? p.token_of_row[r] == -1 : r < p.scale_pitch;
  if (!unowned) return;
  const float scale = formats::blockwise_scale(0.0f).scale;
  for (int g = 0; g < p.scale_groups; ++g)
    p.scales[static_cast<int64_t>(g) * p.scale_pitch + r] = scale;
}

// One K-major scale, stored with the L2 hint evict_last. A token's k·ceil(H/128) scales are
// scattered 4-byte writes, each a partial 32-byte sector of a scale plane; among the code rows'
// streaming writes an evict-normal sector left L2 before the rest of it was written, to be
// completed in DRAM. Kept in L2, a sector fills up first: run 24 (call 6) 0.63 → 0.77 of copy on
// qwen3, 0.70 → 0.81 gpt-oss, 0.66 → 0.71 deepseek, mixtral 0.70 either way; without any scale
// stores the kernel ran at 0.83-0.86 (call 5). Hinting the code rows' bulk stores evict_first
// as well did not add to it.
__device__ __forceinline__ void store_scale_evict_last(float* p, float v) {
  constexpr uint64_t kEvictLast = static_cast<uint64_t>(cute::TMA::CacheHintSm90::EVICT_LAST);
  asm volatile("st.global.L2::cache_hint.f32 [%0], %1, %2;" ::"l"(p), "f"(v), "l"(kEvictLast)
               : "memory");
}

// 16 bf16 of a staged x row, as vec16.cuh's quantisers hold them.
__device__ __forceinline__ void load16_shared(const uint8_t* src, quant::Raw16<__nv_bfloat16>& r) {
  const uint4* s4 = reinterpret_cast<const uint4*>(src);
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const uint4 u = s4[i];
    r.w[4 * i] = u.x, r.w[4 * i + 1] = u.y, r.w[4 * i + 2] = u.z, r.w[4 * i + 3] = u.w;
  }
}

// The warp quantises the n staged x rows of a group into E4M3 code rows (codes + i·out_row_bytes)
// and stores each 1x128 group's scale for every usable row of the token (rows: the group's
// classified row_of), or, for records, once into the staged record after the codes (the record's
// padding is zeroed by the lane of the row's first vector). Lane l takes the 16-element vectors f = l, l + 32, ... of the group's rows, each row
// padded to whole 128-groups (8 vectors): the 8 lanes of a 128-group are then aligned
// consecutive lanes whatever H is, and one step covers several rows when H is small. Padding
// vectors are zeros in their group's amax (the reference's short last group has no elements
// there) and store nothing. The arithmetic is vec16.cuh's, as in the 1x128 quantiser.
__device__ __forceinline__ void quantise_group(const PermuteParams& p, const uint8_t* stage,
                                               uint8_t* codes, const int* rows, int n, int lane) {
  const int padded = p.scale_groups * kGroupLanes;
  int i = lane / padded, c = lane % padded;  // this lane's vector f = i·padded + c
  for (int f0 = 0; f0 < n * padded; f0 += 32, c += 32) {
    while (c >= padded) c -= padded, ++i;
    const bool live = i < n && c < p.code_vecs;
    quant::Raw16<__nv_bfloat16> v;
    if (live)
      load16_shared(stage + i * p.row_bytes + c * 2 * quant::kVec, v);
    else
      quant::zero16(v);
    const float amax = quant::group_max<kGroupLanes>(quant::amax16(v));
    if (!live) continue;
    const formats::BlockwiseScale s = formats::blockwise_scale(amax);
    uint8_t* record = codes + i * p.out_row_bytes;
    quant::store16_e4m3(record + c * quant::kVec, v, s.multiplier);
    if (c % kGroupLanes != 0) continue;
    if (!p.scales) {
      float* scales = reinterpret_cast<float*>(record + p.code_vecs * quant::kVec);
      scales[c / kGroupLanes] = s.scale;
      if (c == 0)
        for (int b = p.scale_groups; b < (p.out_row_bytes / 4) - p.code_vecs * 4; ++b)
          scales[b] = 0.0f;  // padding: 4-byte words up to the 16-byte record end
      continue;
    }
    float* column = p.scales + static_cast<int64_t>(c / kGroupLanes) * p.scale_pitch;
    for (int j = 0; j < p.top_k; ++j) {
      const int row = rows[i * p.top_k + j];
      if (row >= 0) store_scale_evict_last(column + row, s.scale);
    }
  }
}

template <bool kQuantise>
__global__ void __launch_bounds__(32) permute_kernel(PermuteParams p) {
  extern __shared__ __align__(128) uint8_t smem[];
  __shared__ __align__(8) uint64_t bars[kStages];
  __shared__ int rows_s[kMaxGroupTokens * kDispatchMaxTopK];
  const int lane = threadIdx.x;

  const int stage_bytes = p.group * p.row_bytes;
  // Quantising: kStages code buffers of a group's code rows follow the x stages.
  uint8_t* const code_stages = smem + kStages * stage_bytes;
  const int code_bytes = p.group * p.out_row_bytes;
  // The first group's load is in flight while the warp zeroes its share of unowned rows.
  if (lane == 0) {
    for (int s = 0; s < kStages; ++s) ClusterBarrier::init(&bars[s], 1);
    cutlass::arch::fence_barrier_init();
    if (blockIdx.x < p.groups) load_group<!kQuantise>(p, blockIdx.x, smem, &bars[0]);
  }
  for (int c = blockIdx.x; c < p.zero_chunks; c += gridDim.x) {
    zero_unassigned_rows(p.token_of_row, reinterpret_cast<uint4*>(p.out), p.rows, p.vecs,
                         p.tokens, c * 32, lane, p.health);
    if constexpr (kQuantise) set_unowned_scales(p, c * 32 + lane);
  }
  __syncwarp();

  uint32_t phases = 0;  // bit s: the parity of stage s's next completion
  for (int g = blockIdx.x, it = 0; g < p.groups; g += gridDim.x, ++it) {
    const int s = it % kStages;
    const int t0 = g * p.group;
    const int n = min(p.group, p.tokens - t0);
    const int entries = n * p.top_k;
    const int32_t* group_rows = p.row_of + static_cast<int64_t>(t0) * p.top_k;
    const int32_t first = lane < entries ? group_rows[lane] : 0;
    const int next = g + gridDim.x;
    if (lane == 0 && next < p.groups) {
      // The copy's stores read the stage; the quantiser's warp read it before the last sync.
      if constexpr (!kQuantise) cute::tma_store_wait<0>();
      load_group<!kQuantise>(p, next, smem + (s ^ 1) * stage_bytes, &bars[s ^ 1]);
    }
    // Every lane finished reading rows_s (the previous group's) before the last __syncwarp.
    for (int e = lane; e < entries; e += 32)
      rows_s[e] = usable_row(e == lane ? first : group_rows[e], p.rows, p.health);
    __syncwarp();
    const uint8_t* src = smem + s * stage_bytes;
    if constexpr (kQuantise) {
      uint8_t* codes = code_stages + s * code_bytes;
      // The stores of group it - kStages, the last to read this code buffer, have read it.
      if (lane == 0) cute::tma_store_wait<kStages - 1>();
      ClusterBarrier::wait(&bars[s], (phases >> s) & 1u);  // every lane reads the rows
      __syncwarp();
      quantise_group(p, src, codes, rows_s, n, lane);
      cute::tma_store_fence();  // this lane's code writes, before the bulk stores read them
      __syncwarp();
      src = codes;
    } else if (lane == 0) {
      ClusterBarrier::wait(&bars[s], (phases >> s) & 1u);
      cute::tma_store_fence();  // order the completed load before the stores that read it
    }
    phases ^= 1u << s;
    if (lane == 0) {
      for (int e = 0; e < n * p.top_k; ++e) {
        const int row = rows_s[e];
        if (row >= 0)
          bulk_store<!kQuantise>(src + (e / p.top_k) * p.out_row_bytes,
                                 p.out + static_cast<int64_t>(row) * p.out_row_bytes,
                                 p.out_row_bytes);
      }
      cute::tma_store_arrive();
    }
    __syncwarp();
  }
  // The stores must have finished reading shared memory before the block's smem is released.
  if (lane == 0) cute::tma_store_wait<0>();
}

// Tokens per group and dynamic shared memory of a kernel variant for rows of `hidden` elements:
// a stage holds about the target's bytes of x rows (1..kMaxGroupTokens tokens); quantising, each
// token also has code_row_bytes (H, or an FP8 record's) in each of the kStages code buffers.
struct StagePlan {
  int64_t group, smem;
};

StagePlan plan_stages(int64_t hidden, int64_t code_row_bytes, const PermuteTuning& tuning) {
  const int64_t group = permute_stage_rows(hidden, tuning);
  const int64_t token_bytes = 2 * hidden + code_row_bytes;
  const int64_t smem = kStages * group * token_bytes;
  MOEFUSE_EXPECT(smem <= kMaxDynamicSmem, "x.shape[1]",
                 "a hidden size whose two stages of one row fit shared memory (" +
                     std::to_string(kMaxDynamicSmem) + " bytes)",
                 std::to_string(hidden) + " (" + std::to_string(kStages * token_bytes) +
                     " bytes)");
  return {.group = group, .smem = smem};
}

// The fields both variants share, for the validated shape `s` writing `out` rows.
PermuteParams row_params(const RowsShape& s, const StagePlan& plan, const TensorView& x,
                         const TensorView& row_of, const TensorView& token_of_row,
                         uint8_t* out, int64_t out_row_bytes, int32_t* health) {
  return {
      .x = x.as<const uint8_t>(),
      .row_of = row_of.as<const int32_t>(),
      .token_of_row = token_of_row.as<const int32_t>(),
      .out = out,
      .tokens = static_cast<int>(s.tokens),
      .top_k = static_cast<int>(s.top_k),
      .rows = static_cast<int>(s.rows),
      .row_bytes = static_cast<int>(s.hidden * 2),
      .out_row_bytes = static_cast<int>(out_row_bytes),
      .vecs = static_cast<int>(out_row_bytes / 16),
      .code_vecs = static_cast<int>(s.hidden / 16),
      .group = static_cast<int>(plan.group),
      .groups = static_cast<int>((s.tokens + plan.group - 1) / plan.group),
      .zero_chunks = static_cast<int>((s.rows + 31) / 32),
      .health = health,
      .scales = nullptr,
      .scale_groups = 0,
      .scale_pitch = 0,
  };
}

// The persistent grid: one block per group or zero chunk, at most what fits on the device.
// ctas_per_sm: 0 for as many as fit.
template <bool kQuantise>
void launch_permute(const PermuteParams& p, int64_t smem, int ctas_per_sm, cudaStream_t stream) {
  if (p.groups == 0 && p.zero_chunks == 0) return;
  MOEFUSE_CUDA_CHECK(cudaFuncSetAttribute(permute_kernel<kQuantise>,
                                          cudaFuncAttributeMaxDynamicSharedMemorySize,
                                          static_cast<int>(smem)));
  int per_sm = 0;
  MOEFUSE_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(
      &per_sm, permute_kernel<kQuantise>, 32, static_cast<size_t>(smem)));
  if (ctas_per_sm > 0) per_sm = std::min(per_sm, ctas_per_sm);
  const int work = std::max(p.groups, p.zero_chunks);
  const int blocks = std::max(1, std::min(work, device_sm_count() * std::max(per_sm, 1)));
  permute_kernel<kQuantise><<<blocks, 32, smem, stream>>>(p);
  MOEFUSE_CUDA_CHECK_LAUNCH();
}

}  // namespace
}  // namespace cuda

int64_t cuda::permute_stage_rows(int64_t hidden, const PermuteTuning& tuning) {
  const int64_t row_bytes = hidden * 2;
  // The minimum gives way where that many rows' stages would not fit (x's stages alone: only
  // the copy asks for more than one), so the widest rows still run one a stage.
  const int64_t min_rows = row_bytes % 256 != 0
                               ? std::max(tuning.min_rows, tuning.split_unit_min_rows)
                               : tuning.min_rows;
  const int64_t fit = kMaxDynamicSmem / (kStages * row_bytes);
  const int64_t rows = std::max(tuning.stage_bytes / row_bytes, std::min(min_rows, fit));
  return std::clamp<int64_t>(rows, 1, kMaxGroupTokens);
}

void cuda::permute_tuned(const TensorView& x, const TensorView& row_of,
                         const TensorView& token_of_row, const TensorView& xs,
                         const TensorView& health, const PermuteTuning& tuning,
                         cudaStream_t stream) {
  const RowsShape s = check_permute(x, row_of, token_of_row, xs);
  int32_t* flag = expect_health(health);
  const StagePlan plan = plan_stages(s.hidden, /*code_row_bytes=*/0, tuning);
  expect_launchable(stream);
  const PermuteParams p =
      row_params(s, plan, x, row_of, token_of_row, xs.as<uint8_t>(), s.hidden * 2, flag);
  launch_permute<false>(p, plan.smem, tuning.ctas_per_sm, stream);
}

void permute(const TensorView& x, const TensorView& row_of, const TensorView& token_of_row,
             const TensorView& xs, const TensorView& health, cudaStream_t stream) {
  cuda::permute_tuned(x, row_of, token_of_row, xs, health, cuda::kPermuteCopyTuning, stream);
}

void cuda::permute_quantize_fp8_tuned(const TensorView& x, const TensorView& row_of,
                                      const TensorView& token_of_row, const TensorView& xs_fp8,
                                      const TensorView& xs_scales, const TensorView& health,
                                      const PermuteTuning& tuning, cudaStream_t stream) {
  const RowsShape s = check_permute_quantize_fp8(x, row_of, token_of_row, xs_fp8, xs_scales);
  int32_t* flag = expect_health(health);
  const StagePlan plan = plan_stages(s.hidden, /*code_row_bytes=*/s.hidden, tuning);
  expect_launchable(stream);
  PermuteParams p =
      row_params(s, plan, x, row_of, token_of_row, xs_fp8.as<uint8_t>(), s.hidden, flag);
  p.scales = xs_scales.as<float>();
  p.scale_groups = static_cast<int>(fp8_scale_groups(s.hidden));
  p.scale_pitch = static_cast<int>(fp8_scale_rows(s.rows));
  p.zero_chunks = static_cast<int>((p.scale_pitch + 31) / 32);
  launch_permute<true>(p, plan.smem, tuning.ctas_per_sm, stream);
}

void permute_quantize_fp8(const TensorView& x, const TensorView& row_of,
                          const TensorView& token_of_row, const TensorView& xs_fp8,
                          const TensorView& xs_scales, const TensorView& health,
                          cudaStream_t stream) {
  cuda::permute_quantize_fp8_tuned(x, row_of, token_of_row, xs_fp8, xs_scales, health, {},
                                   stream);
}

void permute_quantize_fp8_records(const TensorView& x, const TensorView& row_of,
                                  const TensorView& token_of_row, const TensorView& records,
                                  const TensorView& health, cudaStream_t stream) {
  const cuda::RowsShape s =
      cuda::check_permute_quantize_fp8_records(x, row_of, token_of_row, records);
  int32_t* flag = cuda::expect_health(health);
  const int64_t record_bytes = formats::fp8_record_bytes(s.hidden);
  const cuda::StagePlan plan =
      cuda::plan_stages(s.hidden, record_bytes, cuda::PermuteTuning{});
  cuda::expect_launchable(stream);
  cuda::PermuteParams p = cuda::row_params(s, plan, x, row_of, token_of_row,
                                           records.as<uint8_t>(), record_bytes, flag);
  p.scale_groups = static_cast<int>(formats::fp8_record_groups(s.hidden));
  cuda::launch_permute<true>(p, plan.smem, /*ctas_per_sm=*/0, stream);
}

}  // namespace moefuse
