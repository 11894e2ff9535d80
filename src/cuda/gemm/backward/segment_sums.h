// Per-expert column sums of a row-grouped bf16 matrix (the bias gradients), with each row's dot
// against its expert's row of an fp32 matrix in the same pass (the FC2 bias's term of dp).
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace moefuse::gemm::bwd {

// Columns of a piece: a warp's 32 lanes × 8 (one 16-byte vector a lane and row).
inline constexpr int kSegmentPiece = 256;
// Rows of a unit, the work of one block: each expert's rows split from its first row into
// units of this many (the last one shorter), so that an expert holding most rows (skewed
// routing) is summed by as many blocks as its rows fill, and every sum depends on the expert's
// rows only, not on where in the buffer they lie.
inline constexpr int kSegmentRows = 256;

inline int64_t segment_pieces(int64_t cols) {
  return (cols + kSegmentPiece - 1) / kSegmentPiece;
}
__host__ __device__ inline int64_t segment_units(int64_t rows) {
  return (rows + kSegmentRows - 1) / kSegmentRows;
}
// Units of all experts at most, whatever the split of m_cap rows among num_experts: each
// expert's last unit may be partial.
inline int64_t segment_units_cap(int64_t m_cap, int64_t num_experts) {
  return segment_units(m_cap) + num_experts;
}

// For each expert e, over its rows r in [offsets[e], min(offsets[e + 1], m_cap)) of a:
//   sums[e, c]       = Σ_r w[r]·a[r, c]   (w = row_weight[r], or 1 when null; sums null: none;
//                                          with accumulate, the old sums[e, c] plus it, and an
//                                          expert without rows keeps its old sums bit for bit)
//   dot_partial[q, r] = Σ_{c in piece q} a[r, c]·dot_with[e, c]   (dot_with null: none)
// fp32, every sum in a fixed order (rows of a unit by warp, then the warps in order, then the
// units in order): bitwise repeatable. cols a multiple of 8; a and dot_with 16-byte aligned.
// Rows outside the experts' ranges are not touched.
struct SegmentSums {
  const __nv_bfloat16* a = nullptr;  // [m_cap, cols]
  const int* offsets = nullptr;      // [num_experts + 1]
  int num_experts = 0;               // ≤ 1024
  int m_cap = 0;
  int cols = 0;
  const float* row_weight = nullptr;  // [m_cap] or null
  float* sums = nullptr;              // [num_experts, cols] or null
  bool accumulate = false;
  // Scratch when sums is set: each unit's column sums, added per expert by a second kernel.
  float* unit_sums = nullptr;       // [segment_units_cap(m_cap, num_experts), cols]
  const float* dot_with = nullptr;  // [num_experts, cols] or null
  float* dot_partial = nullptr;     // [segment_pieces(cols), m_cap] when dot_with is set
};
void launch_segment_sums(const SegmentSums& s, cudaStream_t stream);

}  // namespace moefuse::gemm::bwd
