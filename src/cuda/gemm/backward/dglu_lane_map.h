// Which lane of the dGLU drain's epilogue warps finishes which piece of a handed-over tile
// (dglu_drain.cuh): the tile's rows are kN columns wide, cut in octets of 8 columns (a 16-byte
// bf16 access). A row goes to a row group of 8 lanes, each lane taking kN / 64 of its octets:
// lane l of the group octets l, l + 8, ... A warp finishes 4 rows side by side; epilogue warp w
// takes rows 4w .. 4w + 3, then the same kStride = 4 · kWarps rows further on, and so on.
//   Why 8 lanes at every width (session 38, docs/measurements.md "Run 38"): a row group of 32
// lanes over 192 columns (24 octets) left 8 lanes, a quarter of the drain's issue slots, idle
// (with them at work the narrow fused FC2 dgrad took 0.94-0.95x the time on qwen3); and where
// whole groups of 32 or 16 lanes fit (256, 128 columns), a lane's several octets of a row still
// share its per-row work — the routing-prob scale, the pointer steps, a dp tree of three
// shuffles instead of five or four — for the wide dGLU 0.994x and the FP8 one ~0.9x the time.
//   The lanes of a row group are an aligned block of 8, so an xor-shuffle tree over offsets 4, 2, 1
// sums a row's partial dp without mixing rows.
// Constexpr arithmetic, used on the device (--expt-relaxed-constexpr) and brute-forced on the CPU
// (tests/cpu/gemm_dglu_lane_map_test.cpp).
#pragma once

namespace moefuse::gemm::bwd {

template <int kN, int kWarps>
struct DGluLaneMap {
  static_assert(kN % 64 == 0, "a row's octets must fill its group of 8 lanes");
  static constexpr int kOctets = kN / 8;                    // of a row
  static constexpr int kGroupLanes = 8;                     // lanes of a row group
  static constexpr int kLaneOctets = kOctets / kGroupLanes;  // a lane's octets of a row
  static constexpr int kWarpRows = 32 / kGroupLanes;  // rows a warp finishes side by side
  static constexpr int kStride = kWarps * kWarpRows;  // from one of a lane's rows to its next

  // The tile row of warp `warp`'s lane `lane` in its first step (then + kStride, + 2 kStride, ...).
  static constexpr int first_row(int warp, int lane) {
    return kWarpRows * warp + lane / kGroupLanes;
  }
  // The j-th octet (j < kLaneOctets) lane `lane` finishes of its rows.
  static constexpr int octet(int lane, int j) { return lane % kGroupLanes + kGroupLanes * j; }
};

}  // namespace moefuse::gemm::bwd
