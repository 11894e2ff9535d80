// The parts of EpMoeLayer's chunked transfers (EpLayerOptions::chunks) and what each part's
// GEMMs read: part g is local experts [g·El/G, (g+1)·El/G) of every rank, its slice of the
// per-expert weights and gradients (dim 0), and its slice of the receive offsets (absolute rows
// of received(): the GEMMs address the whole buffers).
#pragma once

#include "dist/nccl/ep_comm.h"
#include "moefuse/dtype.h"
#include "moefuse/tensor.h"

namespace moefuse::dist {

class EpChunks {
 public:
  // count 1: one part of every expert, on the transfer's default CTAs.
  EpChunks(const EpComm& ep, int count, int transfer_ctas)
      : ep_(ep), count_(count), ctas_(transfer_ctas),
        experts_(ep.plan().experts_per_rank) {}

  int count() const { return count_; }
  bool pipelined() const { return count_ > 1; }

  TransferPart part(int g) const {
    return {.first_expert = g * experts_ / count_,
            .end_expert = (g + 1) * experts_ / count_,
            .ctas = ctas_};
  }

  // Part g's experts of a per-expert tensor [El, ...] (absent stays absent).
  TensorView experts(const TensorView& t, int g) const {
    if (is_absent(t)) return t;
    const TransferPart p = part(g);
    TensorView s = t;  // the same strides; dim 0 from the part's first expert
    s.data = static_cast<char*>(t.data) + p.first_expert * t.stride(0) * dtype_bits(t.dtype) / 8;
    s.shape[0] = p.end_expert - p.first_expert;
    return s;
  }

  // Part g's receive offsets [experts + 1].
  TensorView offsets(int g) const {
    const TransferPart p = part(g);
    return TensorView::contiguous(ep_.receive_offsets().as<int32_t>() + p.first_expert,
                                  DType::kInt32, {p.end_expert - p.first_expert + 1},
                                  Device::kCuda);
  }

 private:
  const EpComm& ep_;
  int count_, ctas_, experts_;
};

}  // namespace moefuse::dist
