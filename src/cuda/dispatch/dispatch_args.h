// Validation of the dispatch entry points (host only, before any CUDA call).
#pragma once

#include <cstdint>
#include <string_view>

#include "moefuse/dispatch.h"
#include "moefuse/tensor.h"

namespace moefuse::cuda {

struct MapsShape {
  int64_t tokens, top_k, experts, rows;
};

void check_expert_offsets(const TensorView& counts, const TensorView& offsets, int64_t align);

MapsShape check_dispatch_maps(const TensorView& expert_idx, int64_t num_experts, int64_t align,
                              const DispatchMaps& maps);

// Shapes of the row-moving ops: T tokens, k, R rows, H hidden.
struct RowsShape {
  int64_t tokens, top_k, rows, hidden;
};

RowsShape check_permute(const TensorView& x, const TensorView& row_of,
                        const TensorView& token_of_row, const TensorView& xs);
RowsShape check_permute_quantize_fp8(const TensorView& x, const TensorView& row_of,
                                     const TensorView& token_of_row, const TensorView& xs_fp8,
                                     const TensorView& xs_scales);
RowsShape check_permute_quantize_fp8_records(const TensorView& x, const TensorView& row_of,
                                             const TensorView& token_of_row,
                                             const TensorView& records);
RowsShape check_permute_backward(const TensorView& dxs, const TensorView& row_of,
                                 const TensorView& dx);
RowsShape check_combine(const TensorView& ys, const TensorView& probs, const TensorView& row_of,
                        const TensorView& y);
// The added term of combine_add and permute_backward_add: bf16 [T, H] of s, `out` itself or
// apart from it (out_name: "y" or "dx").
void check_added_term(const TensorView& add, const RowsShape& s, const TensorView& out,
                      std::string_view out_name);
// The router's term of permute_backward_router: d_logits fp32 [T, E] and w_router bf16 [E, H],
// 1 <= E <= kRouterMaxExperts; returns E.
int64_t check_router_dx_term(const TensorView& d_logits, const TensorView& w_router,
                             const RowsShape& s);
RowsShape check_combine_backward(const TensorView& dy, const TensorView& ys,
                                 const TensorView& probs, const TensorView& row_of,
                                 const TensorView& token_of_row, const TensorView& dys,
                                 const TensorView& d_probs);

}  // namespace moefuse::cuda
