// CPU reference of token dispatch: offsets, expert-contiguous permutation and combine, with
// backward. The GPU dispatch kernels produce exactly these maps.
//
// Order: the T·k assignments (t, j) are placed expert by expert; inside expert e, by increasing
// token t (stable, deterministic). offsets[e] is the first row of expert e, offsets[E] the total
// rows used. With align > 1 each expert's first row is a multiple of `align` (rows in the gaps
// belong to no assignment; token_of_row holds -1 there): every expert's segment is padded to a
// multiple of `align`, so offsets is the exclusive scan of round_up(counts, align) and offsets[E]
// is a multiple of `align` too. Maps:
//   row_of   [T, k]: the permuted row of assignment (t, j)
//   token_of_row [rows]: the token a row came from, -1 for padding rows
#pragma once

#include <cstdint>

#include "moefuse/tensor.h"

namespace moefuse::ref {

// offsets [E+1] int32 from counts [E] int32. Returns offsets[E].
int64_t expert_offsets(const TensorView& counts, const TensorView& offsets, int64_t align = 1);

// row_of [T, k] and token_of_row [R] (R >= offsets[E]; rows past offsets[E] get -1) from
// expert_idx [T, k] and offsets [E+1].
void dispatch_maps(const TensorView& expert_idx, const TensorView& offsets,
                   const TensorView& row_of, const TensorView& token_of_row);

// xs [R, H]: xs[row] = x[token_of_row[row]], zero for padding rows.
void permute(const TensorView& x, const TensorView& token_of_row, const TensorView& xs);

// dx [T, H] = sum over j of dxs[row_of[t, j]].
void permute_backward(const TensorView& dxs, const TensorView& row_of, const TensorView& dx);

// y [T, H] = sum_j probs[t, j] · ys[row_of[t, j]].
void combine(const TensorView& ys, const TensorView& probs, const TensorView& row_of,
             const TensorView& y);

// dys [R, H]: dys[row_of[t, j]] = probs[t, j] · dy[t] (zero for padding rows);
// d_probs [T, k] = <dy[t], ys[row_of[t, j]]>.
void combine_backward(const TensorView& dy, const TensorView& ys, const TensorView& probs,
                      const TensorView& row_of, const TensorView& dys, const TensorView& d_probs);

}  // namespace moefuse::ref
