// The EP transfer kernels (EpComm's dispatch and return_rows), pushing rows into peers' windows
// with 16-byte stores through NCCL's LSA (NVLink load/store) pointers.
//
// Synchronisation: CTA b of every rank owns LSA barrier b (ncclLsaBarrierSession over the LSA
// team, which is the whole communicator), so all ranks launch the same grid. A barrier only
// orders the writes of the CTAs that share it, hence every CTA publishes the offsets itself.
// Every sync is acq_rel: arrive is a release store per peer after a CTA barrier (covering all
// the CTA's earlier writes), wait an acquire load per peer before one (covering its later reads).
//
//   dispatch, per CTA b:  sync (entry)  -> write own offsets into row `rank` of every peer's
//                         gathered window -> sync -> read the gathered offsets, push the rows
//                         of this rank's xs to their owners -> sync (exit)
//   return,   per CTA b:  sync (entry)  -> push received rows back to their sources -> sync (exit)
// A call moves the rows of local experts [lo, hi) of every rank (a chunk; all of them: [0, El)).
// Every dispatch exchanges the offsets again (the same ones, for the chunks of one step) and
// writes the receive offsets of all El experts, so each call stands alone.
//
// Entry: a peer's earlier stream work (the readers of the buffers written next: expert GEMMs,
// combine, host copies) has finished before anything is written into its windows. Exit: when the
// kernel ends on a rank, every peer's writes into that rank's windows are complete and visible.
// The gathered offsets are read only between dispatch's second sync and the next kernel's entry
// sync, so a peer's next dispatch cannot overwrite them while they are read.
#pragma once

#include <nccl.h>
#include <nccl_device.h>

#include <cstdint>

#include "cuda/gemm/tile_scheduler.h"
#include "dist/ep_layout.h"
#include "dist/nccl/ep_comm.h"

namespace moefuse::dist::detail {

inline constexpr int kEpThreads = 512;  // 16 warps, one row each at a time
inline constexpr int kEpCtasPerSm = 2;

struct EpKernelParams {
  ncclDevComm comm;
  ncclWindow_t offsets_win, recv_win, ret_win;
  int experts;
  int64_t row_vecs;  // 16-byte vectors per row: H / 8 (bf16), fp8_record_bytes(H) / 16 (records)
  int64_t send_bound, capacity;
  int32_t* recv_offsets;  // [E/R + 1], this rank's
  int32_t* flags;         // [1], this rank's
  int lo, hi;             // the chunk: local experts [lo, hi) of every rank
};

// Dynamic shared memory of each kernel; a receiver's segment starts are El·R + 1 = E + 1 int64.
// dispatch: every receiver's segment starts [R][E + 1] int64, the chunk's first row for each
// receiver [R + 1] int64, then own offsets [E + 1] int32.
inline size_t ep_dispatch_smem(int experts, int ranks) {
  return (size_t(ranks) * (experts + 1) + ranks + 1) * sizeof(int64_t) +
         size_t(experts + 1) * sizeof(int32_t);
}
// return: this rank's segment starts [E + 1] int64, then the same as int32 (for find_expert;
// they fit: at most R·send_bound <= INT32_MAX, checked by make_ep_plan).
inline size_t ep_return_smem(int experts) {
  return size_t(experts + 1) * (sizeof(int64_t) + sizeof(int32_t));
}

__device__ inline GatheredOffsets ep_gathered(const EpKernelParams& p) {
  return {static_cast<const int32_t*>(ncclGetLocalPointer(p.offsets_win, 0)), p.comm.nRanks,
          p.experts};
}

// Whether every rank's offsets are non-decreasing within [0, send_bound]; the same answer on
// every thread (a CTA-wide call) and on every rank (the same gathered offsets).
__device__ inline bool ep_offsets_valid(const GatheredOffsets& g, int64_t send_bound) {
  bool bad = false;
  for (int i = threadIdx.x; i < g.ranks * (g.experts + 1); i += blockDim.x) {
    const int s = i / (g.experts + 1), e = i % (g.experts + 1);
    const int32_t row = g.first_row(s, e);
    bad |= row < 0 || row > send_bound || (e > 0 && row < g.first_row(s, e - 1));
  }
  return !__syncthreads_or(bad);
}

// One warp copies one row, lane-strided 16-byte vectors (rows are 16-byte aligned: H % 8 == 0).
__device__ inline void ep_copy_row(uint4* __restrict__ to, const uint4* __restrict__ from,
                                   int64_t vecs) {
#pragma unroll 4
  for (int64_t v = threadIdx.x % 32; v < vecs; v += 32) to[v] = from[v];
}

// xs: [send_bound, row_vecs] 16-byte vectors (bf16 rows or FP8 records); offsets: [E + 1],
// this rank's.
__global__ void __launch_bounds__(kEpThreads) ep_dispatch_kernel(
    const EpKernelParams p, const uint4* __restrict__ xs, const int32_t* __restrict__ offsets) {
  extern __shared__ int64_t ep_smem[];
  const int ranks = p.comm.nRanks, me = p.comm.rank, experts = p.experts;
  const int el = experts_per_rank(experts, ranks);
  const int64_t table = experts + 1;
  int64_t* starts = ep_smem;  // receiver d's segment_start(l, s) at [d·table + l·R + s]
  int64_t* chunk = ep_smem + ranks * table;  // [R + 1]: the chunk's rows for d are
                                             // [chunk[d], chunk[d + 1]) of the chunk's order
  int32_t* own = reinterpret_cast<int32_t*>(chunk + ranks + 1);

  ncclLsaBarrierSession<ncclCoopCta> bar(ncclCoopCta(), p.comm, ncclTeamTagLsa(), blockIdx.x);
  bar.sync(ncclCoopCta(), ::cuda::memory_order_acq_rel);

  const size_t my_row = size_t(me) * (experts + 1) * sizeof(int32_t);
  for (int i = threadIdx.x; i < ranks * (experts + 1); i += blockDim.x) {
    const int d = i / (experts + 1), e = i % (experts + 1);
    static_cast<int32_t*>(ncclGetPeerPointer(p.offsets_win, my_row, d))[e] = offsets[e];
  }
  bar.sync(ncclCoopCta(), ::cuda::memory_order_acq_rel);

  const GatheredOffsets g = ep_gathered(p);
  const bool valid = ep_offsets_valid(g, p.send_bound);
  if (valid) {
    if (threadIdx.x < ranks) receive_segment_starts(g, threadIdx.x, starts + threadIdx.x * table);
    for (int e = threadIdx.x; e <= experts; e += blockDim.x) own[e] = g.first_row(me, e);
  }
  __syncthreads();
  const bool overflow = __syncthreads_or(valid && threadIdx.x < ranks &&
                                         starts[threadIdx.x * table + el * ranks] > p.capacity);

  if (blockIdx.x == 0 && threadIdx.x == 0) {
    if (valid) {
      receive_expert_offsets(g, me, p.recv_offsets);
      for (int l = 0; l <= el; ++l)
        if (p.recv_offsets[l] > p.capacity) p.recv_offsets[l] = static_cast<int32_t>(p.capacity);
    } else {
      for (int l = 0; l <= el; ++l) p.recv_offsets[l] = 0;
    }
    const int32_t bits = (valid ? 0 : kEpBadOffsets) | (overflow ? kEpRowsOverflow : 0);
    if (bits != 0) atomicOr(p.flags, bits);
  }

  // The chunk's rows: for each receiver d, xs rows own[d·el + lo] .. own[d·el + hi].
  if (valid && threadIdx.x == 0) {
    int64_t sum = 0;
    for (int d = 0; d < ranks; ++d) {
      chunk[d] = sum;
      sum += own[d * el + p.hi] - own[d * el + p.lo];
    }
    chunk[ranks] = sum;
  }
  __syncthreads();

  if (valid) {
    const int warps = blockDim.x / 32;
    for (int64_t j = int64_t(blockIdx.x) * warps + threadIdx.x / 32; j < chunk[ranks];
         j += int64_t(gridDim.x) * warps) {
      int d = 0;
      while (chunk[d + 1] <= j) ++d;
      const int32_t* first = own + d * el + p.lo;  // the chunk's experts of receiver d
      const int64_t i = first[0] + (j - chunk[d]);
      const int l = p.lo + gemm::find_expert(first, p.hi - p.lo, int(i));
      const int e = d * el + l;
      const int64_t dst = starts[d * table + l * ranks + me] + (i - own[e]);
      if (dst >= p.capacity) continue;  // dropped: kEpRowsOverflow
      auto* to = static_cast<uint4*>(
          ncclGetPeerPointer(p.recv_win, size_t(dst) * p.row_vecs * sizeof(uint4), d));
      ep_copy_row(to, xs + i * p.row_vecs, p.row_vecs);
    }
  }
  bar.sync(ncclCoopCta(), ::cuda::memory_order_acq_rel);
}

// ys: [capacity, H] bf16 as vectors, in this rank's receive layout.
__global__ void __launch_bounds__(kEpThreads) ep_return_kernel(const EpKernelParams p,
                                                               const uint4* __restrict__ ys) {
  extern __shared__ int64_t ep_smem[];
  const int ranks = p.comm.nRanks, me = p.comm.rank;
  const int el = experts_per_rank(p.experts, ranks);
  int64_t* starts = ep_smem;  // this rank's segment_start(l, s) at [l·R + s]
  int32_t* starts32 = reinterpret_cast<int32_t*>(ep_smem + p.experts + 1);

  ncclLsaBarrierSession<ncclCoopCta> bar(ncclCoopCta(), p.comm, ncclTeamTagLsa(), blockIdx.x);
  bar.sync(ncclCoopCta(), ::cuda::memory_order_acq_rel);

  const GatheredOffsets g = ep_gathered(p);
  const bool valid = ep_offsets_valid(g, p.send_bound);
  if (valid && threadIdx.x == 0) receive_segment_starts(g, me, starts);
  __syncthreads();
  for (int q = threadIdx.x; valid && q <= p.experts; q += blockDim.x)
    starts32[q] = int32_t(starts[q]);
  __syncthreads();

  if (valid) {
    // The chunk's received rows are contiguous: local experts lo .. hi - 1, all sources each.
    const int64_t end = starts[p.hi * ranks] < p.capacity ? starts[p.hi * ranks] : p.capacity;
    const int warps = blockDim.x / 32;
    for (int64_t j = starts[p.lo * ranks] + int64_t(blockIdx.x) * warps + threadIdx.x / 32;
         j < end; j += int64_t(gridDim.x) * warps) {
      const int q = gemm::find_expert(starts32, el * ranks, int(j));
      const int l = q / ranks, s = q % ranks;
      const int64_t dst = g.first_row(s, me * el + l) + (j - starts[q]);
      auto* to = static_cast<uint4*>(
          ncclGetPeerPointer(p.ret_win, size_t(dst) * p.row_vecs * sizeof(uint4), s));
      ep_copy_row(to, ys + j * p.row_vecs, p.row_vecs);
    }
  }
  bar.sync(ncclCoopCta(), ::cuda::memory_order_acq_rel);
}

}  // namespace moefuse::dist::detail
