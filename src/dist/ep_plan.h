// The host side of expert parallelism (EP): which experts a rank owns and how many rows its send
// and receive buffers hold, checked once before any transfer. Where the rows go is ep_layout.h.
#pragma once

#include <cstdint>

namespace moefuse::dist {

struct EpPlanArgs {
  int experts = 0;                    // E, over all ranks
  int ranks = 0;                      // R, E % R == 0
  int rank = 0;                       // this rank, in [0, R)
  int64_t max_tokens_per_rank = 0;    // the most tokens any rank routes in one step
  int top_k = 0;                      // k
  int64_t receive_capacity_rows = 0;  // rows of the receive buffer; 0: the worst case
};

struct EpPlan {
  int experts = 0, ranks = 0, rank = 0;
  int experts_per_rank = 0;  // El = E / R
  int first_expert = 0;      // rank·El: this rank owns experts [first_expert, first_expert + El)
  int64_t send_rows = 0;     // max_tokens_per_rank·k: the rows of a rank's xs, all sent somewhere
  // Rows the receive buffer holds. The worst case, R·max_tokens_per_rank·k (every rank routes
  // every token k times to this rank's experts), unless the caller gives a smaller bound; then a
  // step that receives more is the transport's to flag (EpComm: kEpRowsOverflow), not a silent
  // overflow.
  int64_t receive_capacity_rows = 0;
};

// Throws InvalidArgument naming the first bad field of `args` ("ranks", "rank", "experts",
// "top_k", "max_tokens_per_rank", "receive_capacity_rows"). Every offset of xs and of the
// receive layout is int32 (moefuse/dispatch.h, ep_layout.h) and counts all rows sent to a rank,
// so the worst case R·max_tokens_per_rank·k must stay below 2^31; a given capacity lies in
// [1, that worst case]. EpComm (dist/nccl/ep_comm.h) takes its sizes from this plan.
EpPlan make_ep_plan(const EpPlanArgs& args);

}  // namespace moefuse::dist
