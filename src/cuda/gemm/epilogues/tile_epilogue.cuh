// The overlapped epilogue: consumers hand the finished tile to the epilogue warps through shared
// memory and go straight back to the mainloop, so bias, activation, row scale and every global
// store of tile i run while the tensor cores work on tile i + 1.
//
// Hand-off (one tile buffer, two mbarriers: common/tile_handoff.cuh has the protocol), once per
// tile (epilogues/staged_tile.cuh, shared with the FP8 kernel):
//   consumers (256 threads): write h + bias as bf16 into the tile buffer [128 rows × N columns
//     (256, or 192 where narrow_width), row pitch 2N + 16 bytes, so a warp's 8 rows of 16-byte
//     pieces hit all 32 banks: config.h TileConfig], or for the linear output without a saved
//     pre-activation (h + bias) · the row scale.
//   epilogue warps (96 threads): the saved pre-activation and the activated, scaled output,
//     masked by rows (< the expert's end) and columns (< N) (drain_staged_tile.cuh); or that
//     linear output's valid rows by bulk copies.
// The activation thus reads the bf16-rounded h, exactly the pre-activation saved for backward
// (so the forward and the backward's recomputation agree) and what an unfused bf16 path computes.
#pragma once
