// Expert-parallel (EP) transport over NCCL's device API: one rank's windows, device communicator
// and the two transfer kernels, dispatch (rows to the experts' owners) and return_rows (expert
// outputs back to their sources). Where each row goes is dist/ep_layout.h.
//
// Peers are reached by load/store over NVLink (NCCL's LSA team), so every rank of the
// communicator must be LSA-reachable from every other (one NVLink domain). No call synchronises
// with the host and none allocates after construction: dispatch and return_rows are CUDA-graph
// capturable, and the host never learns the row counts.
//
// Protocol (the kernels of all ranks wait on each other's barriers):
//   - every rank calls the constructor with the same arguments, and dispatch / return_rows in the
//     same sequence, each on one stream at a time (the calls of one EpComm are stream-ordered);
//   - all ranks' kernels must be able to run concurrently: never wait for one rank's stream before
//     every rank has launched the matching call;
//   - received(), receive_offsets() and returned() hold the last call's results until this rank's
//     next dispatch or return_rows: each kernel starts with a barrier, so no peer writes into this
//     rank's windows before this rank's earlier work on the stream (their readers) has finished;
//   - destroy only after the streams that ran the kernels are synchronised.
#pragma once

#include <cuda_runtime.h>
#include <nccl.h>
#include <nccl_device.h>

#include <cstdint>

#include "dist/ep_plan.h"
#include "moefuse/tensor.h"

namespace moefuse::dist {

namespace detail {
struct EpKernelParams;
}

// Bits the kernels OR into flags() (never cleared by them; read and reset them with
// read_health_flags / reset_health_flags of moefuse/health.h). Every rank computes them from the
// same gathered offsets, so all ranks set the same bits in the same call.
enum EpFlag : int32_t {
  // Some rank receives more rows than its receive capacity: rows past it are neither written
  // nor returned (their returned() rows keep old contents) and receive_offsets() is clamped to
  // the capacity.
  kEpRowsOverflow = 1 << 0,
  // Some rank's offsets are not a non-decreasing sequence in [0, plan.send_rows]: nothing is
  // transferred and receive_offsets() is all zeros.
  kEpBadOffsets = 1 << 1,
};

// What one call of a chunked transfer moves, and on how many CTAs: the rows of local experts
// [first_expert, end_expert) of every rank (the same on every rank), by `ctas` CTAs of the
// transfer kernel (0: EpComm's default, two on every SM; fewer, about one an SM, leave the
// other SMs to a grouped GEMM running beside it with max_ctas = the rest). Every rank passes the
// same part: CTA b of each rank meets the others at LSA barrier b.
struct TransferPart {
  int first_expert = 0, end_expert = 0;
  int ctas = 0;
};

class EpComm {
 public:
  // Collective over `comm`: every rank calls it, with its own rank's plan (make_ep_plan, which
  // checks E % R and the int32 row bounds; equal on every rank but for `rank`) and rows of
  // `hidden` bf16, a multiple of 8 (rows move as 16-byte vectors). xs is [plan.send_rows, H], the
  // receive buffer [plan.receive_capacity_rows, H]. Allocates (ncclMemAlloc) and registers the
  // symmetric windows, creates the device communicator with one LSA barrier per CTA of the
  // transfer kernels. Throws InvalidArgument on a bad hidden, a null comm or a plan whose ranks /
  // rank are not comm's, NotSupported when a peer is not LSA-reachable or the runtime NCCL's
  // device-API ABI differs from the headers built against, moefuse::Error when an NCCL call
  // fails. `comm` must outlive this object; the current device must be comm's.
  EpComm(ncclComm_t comm, const EpPlan& plan, int hidden);
  ~EpComm();
  EpComm(const EpComm&) = delete;
  EpComm& operator=(const EpComm&) = delete;

  // xs: [plan.send_rows, H] bf16, this rank's permuted rows, expert-contiguous, or the same rows
  // as FP8 row records, [plan.send_rows, fp8_record_bytes(H)] uint8 (formats/fp8_row_record.h;
  // about half the bytes: the FP8 dispatch); offsets: [E + 1] int32 on the device (expert e's
  // rows at [offsets[e], offsets[e+1])). Both stay unread by the host.
  // Afterwards received() (bf16 rows) or received_records() holds this rank's experts' rows in
  // the receive layout (ep_layout.h) and receive_offsets() their per-expert offsets.
  // Asynchronous on `stream`; graph-safe: yes.
  void dispatch(const TensorView& xs, const TensorView& offsets, cudaStream_t stream);
  // One part (TransferPart): receive_offsets() is written whole every time, and a step's parts
  // covering [0, El), in any order, leave received() as one dispatch does. InvalidArgument
  // ("part", "part.ctas") for an empty range or one outside [0, El), or too many CTAs.
  void dispatch(const TensorView& xs, const TensorView& offsets, cudaStream_t stream,
                const TransferPart& part);

  // ys_recv: [plan.receive_capacity_rows, H] bf16, one output row per received row, in the
  // receive layout (it may be received() itself). Uses the offsets of the last dispatch.
  // Afterwards returned() holds this rank's rows in its own xs layout. Asynchronous on `stream`;
  // graph-safe: yes.
  void return_rows(const TensorView& ys_recv, cudaStream_t stream);
  // One part: the received rows of its local experts (contiguous in the receive layout).
  void return_rows(const TensorView& ys_recv, cudaStream_t stream, const TransferPart& part);

  TensorView received() const;         // [plan.receive_capacity_rows, H] bf16
  // The same window as records: [plan.receive_capacity_rows, fp8_record_bytes(H)] uint8 (they
  // fit: a record is at most 2H bytes).
  TensorView received_records() const;
  TensorView receive_offsets() const;  // [E / R + 1] int32
  TensorView returned() const;         // [plan.send_rows, H] bf16
  TensorView flags() const;            // [1] int32, EpFlag bits

  const EpPlan& plan() const { return plan_; }
  int rank() const { return rank_; }
  int ranks() const { return ranks_; }

 private:
  ncclComm_t comm_;
  EpPlan plan_;
  int hidden_ = 0;
  int rank_ = 0, ranks_ = 0, device_ = -1;
  int ctas_ = 0;  // CTAs of a whole transfer (the most a part may take), one LSA barrier each
  int threads_ = 0;
  size_t dispatch_smem_ = 0, return_smem_ = 0;

  // Windows: peers write into them. offsets: [R][E + 1] int32 (row s written by rank s).
  void *offsets_ = nullptr, *recv_ = nullptr, *ret_ = nullptr;
  ncclWindow_t offsets_win_ = nullptr, recv_win_ = nullptr, ret_win_ = nullptr;
  ncclDevComm dev_comm_{};
  bool dev_comm_created_ = false;
  // Local only: receive offsets [E/R + 1] int32 and the flag word, one allocation.
  int32_t* local_ = nullptr;

  int experts_local() const;
  void expect_stream(cudaStream_t stream) const;
  detail::EpKernelParams params() const;
  detail::EpKernelParams params(const TransferPart& part) const;  // checks the part
  int grid(const TransferPart& part) const;
  TransferPart whole() const;  // every local expert, every CTA
  void release() noexcept;
};

}  // namespace moefuse::dist
