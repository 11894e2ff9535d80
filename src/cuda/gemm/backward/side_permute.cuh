// A permute run by a GEMM's epilogue warps between their tiles (GroupedGemmDgradArgs::permute):
// xs[row_of[t, j]] = x[t] for every assignment, zeros in every row whose token_of_row is -1,
// bad entries flagged: what moefuse::permute writes (dispatch/permute.cu), through the same
// row rules (dispatch/rows.cuh), so the two are interchangeable bit for bit.
//
// Why here: the copy is bound by HBM (1 + k)·T·H·2 bytes, the FC1 dgrad by its tensor cores,
// and the dgrad's epilogue warps wait most of a tile for the next one (their drain is a few bulk
// copies). Spread over the dgrad's tiles the copy needs ~0.5 TB/s beside the GEMM's own traffic
// instead of a pass of its own in the step. Run 41 (the layer's step, fused bf16, interleaved
// A/B against the separate pass): 0.988-0.994× the time on qwen3, 0.996-1.005× on the others;
// the dgrad itself slows by part of what the pass took (docs/grouped_gemm_backward.md).
//
// Split: CTA b of G takes tokens [b·T / G, (b + 1)·T / G) and 32-row zeroing chunks [b·C / G,
// (b + 1)·C / G); its tokens go in `pieces` equal pieces, one before its first tile and one
// after each, so that each piece's copy runs while the consumers compute the next tile. A
// piece: the 96 epilogue threads take a token's 16-byte vectors in turn, kInFlight of them
// loaded before they are stored to the token's k rows. No ordering with the GEMM is needed: the
// GEMM never reads x or xs, and every store completes before the grid does.
#pragma once

#include <cstdint>

#include "cuda/dispatch/rows.cuh"
#include "cuda/gemm/backward/params.h"

namespace moefuse::gemm::bwd {

// This CTA's share of the tokens, handed out in pieces.
class SidePermuteShare {
 public:
  // pieces: how many times take_piece will be called (the CTA's tiles + 1).
  __device__ SidePermuteShare(const SidePermute& s, int pieces) : s_(s) {
    const int64_t b = blockIdx.x, g = gridDim.x;
    next_ = static_cast<int>(b * s.tokens / g);
    end_ = static_cast<int>((b + 1) * s.tokens / g);
    per_piece_ = (end_ - next_ + pieces - 1) / max(pieces, 1);
  }

  // Epilogue thread `worker` of `workers`: the next piece of tokens.
  __device__ void take_piece(int worker, int workers) {
    const int end = min(end_, next_ + per_piece_);
    for (int t = next_; t < end; ++t) copy_token(t, worker, workers);
    next_ = end;
  }

  // After the last piece: whatever is left (nothing, unless pieces was too small), then the
  // zero rows of this CTA's chunks, one warp a chunk.
  __device__ void finish(int worker, int workers) {
    for (int t = next_; t < end_; ++t) copy_token(t, worker, workers);
    next_ = end_;
    const int64_t b = blockIdx.x, g = gridDim.x, chunks = (s_.rows + 31) / 32;
    const int lane = worker % 32;
    for (int64_t c = b * chunks / g + worker / 32; c < (b + 1) * chunks / g; c += workers / 32)
      cuda::zero_unassigned_rows(s_.token_of_row, s_.xs, s_.rows, s_.vecs, s_.tokens,
                                 static_cast<int>(c * 32), lane, s_.health);
  }

 private:
  static constexpr int kInFlight = 4;  // 16-byte loads a thread has in flight

  __device__ void copy_token(int t, int worker, int workers) const {
    const uint4* src = s_.x + static_cast<int64_t>(t) * s_.vecs;
    const int32_t* row_of = s_.row_of + static_cast<int64_t>(t) * s_.top_k;
    for (int v0 = worker; v0 < s_.vecs; v0 += kInFlight * workers) {
      uint4 v[kInFlight];
#pragma unroll
      for (int i = 0; i < kInFlight; ++i)
        if (v0 + i * workers < s_.vecs) v[i] = __ldcs(src + v0 + i * workers);
      // One thread reports a bad entry, once a token.
      int32_t* health = worker == 0 && v0 == worker ? s_.health : nullptr;
      for (int j = 0; j < s_.top_k; ++j) {
        const int r = cuda::usable_row(row_of[j], s_.rows, health);
        if (r < 0) continue;
        uint4* dst = s_.xs + static_cast<int64_t>(r) * s_.vecs;
#pragma unroll
        for (int i = 0; i < kInFlight; ++i)
          if (v0 + i * workers < s_.vecs) __stcs(dst + v0 + i * workers, v[i]);
      }
    }
  }

  SidePermute s_;
  int next_, end_, per_piece_;
};

}  // namespace moefuse::gemm::bwd
