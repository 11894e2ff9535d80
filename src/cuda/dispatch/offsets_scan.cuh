// The expert offsets scan shared by expert_offsets and dispatch_maps: one block of kScanThreads
// threads, thread i holding experts 4i..4i+3; offsets[e] = Σ_{i<e} round_up(count_i, align)
// through CUB's block scan (integers: exact, order-free).
#pragma once

#include <cub/block/block_scan.cuh>

#include <cstdint>

namespace moefuse::cuda {

inline constexpr int kScanThreads = 256;
inline constexpr int kScanItems = 4;  // kScanThreads · kScanItems >= kDispatchMaxExperts

using OffsetsScan = cub::BlockScan<int, kScanThreads>;

// Every thread of a kScanThreads block calls it. Writes offsets[0..E] (global or shared memory)
// and returns offsets[E] in every thread.
__device__ __forceinline__ int scan_offsets(OffsetsScan::TempStorage& storage,
                                           const int32_t* counts, int align, int experts,
                                           int32_t* offsets) {
  int padded[kScanItems], first[kScanItems];
#pragma unroll
  for (int i = 0; i < kScanItems; ++i) {
    const int e = threadIdx.x * kScanItems + i;
    const int c = e < experts ? counts[e] : 0;
    padded[i] = (c + align - 1) / align * align;
  }
  int total = 0;
  OffsetsScan(storage).ExclusiveSum(padded, first, total);
#pragma unroll
  for (int i = 0; i < kScanItems; ++i) {
    const int e = threadIdx.x * kScanItems + i;
    if (e < experts) offsets[e] = first[i];
  }
  if (threadIdx.x == 0) offsets[experts] = total;
  return total;
}

}  // namespace moefuse::cuda
