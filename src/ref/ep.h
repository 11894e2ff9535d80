// CPU reference of the expert-parallel (EP) transfers, every rank simulated in one process: the
// dispatch that sends each rank's permuted rows to the ranks owning their experts and the return
// that brings the expert outputs back, both along the map of dist/ep_layout.h (the GPU transport
// follows the same map). Rows are copied byte for byte, so any dtype of whole bytes serves: bf16
// as the GPU sends them, fp32 as the reference layer holds them; all views of one call share it.
//
// R ranks, E experts (E % R == 0), El = E / R, H the row width. All views CPU and contiguous:
//   offsets          [R, E+1] int32  every rank's expert offsets (moefuse/dispatch.h, align 1),
//                                    as the all-gather leaves them: rank s's in row s
//   xs[s], ys[s]     [rows_s, H]     rank s's rows in its own permuted layout,
//                                    rows_s >= offsets[s, E]
//   recv[d]          [capacity_d, H] rank d's receive buffer, capacity_d >= the rows d receives
//   recv_offsets[d]  [El+1] int32    where each of d's local experts starts in recv[d]
// Rows past the received total (recv) or past offsets[s, E] (ys) are left untouched, neither
// read nor written. Each throws InvalidArgument naming the bad view ("xs[2]", "offsets[0]", ...).
#pragma once

#include <span>

#include "moefuse/config.h"
#include "moefuse/tensor.h"
#include "ref/expert_mlp.h"

namespace moefuse::ref {

// recv[d] and recv_offsets[d] for every rank d from every rank's xs.
void ep_dispatch(const TensorView& offsets, std::span<const TensorView> xs,
                 std::span<const TensorView> recv, std::span<const TensorView> recv_offsets);

// The reverse: ys[s] for every rank s from every rank's expert outputs ys_recv[d], laid out as
// ep_dispatch filled recv[d]. In backward the same pair carries dys out and dxs back.
void ep_return(const TensorView& offsets, std::span<const TensorView> ys_recv,
               std::span<const TensorView> ys);

// What one rank's expert MLP sees (expert_mlp_forward / backward on its received rows): the
// config with El experts (router, top_k and shared expert dropped, the MLP reads none of them),
// and rank `rank`'s slice [El, ...] of the expert weights, biases included, or of their gradients.
MoeConfig ep_expert_config(const MoeConfig& config, int ranks);
ExpertWeights ep_expert_slice(const ExpertWeights& weights, int ranks, int rank);

}  // namespace moefuse::ref
