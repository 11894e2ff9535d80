// The epilogue hand-off of the backward kernels: the consumer warpgroups write the finished
// accumulator tile into the shared tile buffer and go straight back to the mainloop; the epilogue
// warps (warps 1-3 of warpgroup 0, 96 threads; in the narrow dGLU dgrad also warpgroup 3, 224)
// drain it to global memory while the tensor cores work on the next tile.
//
// Tile buffer: 128 rows; a row holds 512 bytes of data: a whole tile row as bf16 (256 columns,
// rows kTilePitch = 528 bytes apart) or half of it as fp32 (128 columns, kTilePitchF32 = 544
// apart: config.h says why the pitch follows the type). The narrow dGLU dgrad's (config.h
// DgluNarrowShape): 128 rows × 400 bytes, a 192-column bf16 row. A tile therefore goes over in
// `parts` = 1 (bf16 staging: the dGLU's g, bf16 outputs) or 2 (fp32 outputs: columns 0-127,
// then 128-255) hand-offs; the narrow wgrad's 128 × 192 fp32 tile goes in one, from its own,
// larger buffer (config.h WgradNarrowStages). `parts` is a function of kernel parameters only,
// so both sides agree.
//
// Protocol, and its walk by hand, in common/tile_handoff.cuh; here a hand-off is one part. Both
// sides walk the same tiles (same scheduler, same skip rule: the wgrad's empty experts in
// accumulate mode hand nothing over) with the same `parts`; with 2 parts the consumers wait for
// the drain of part 0 before writing part 1, and part 1 is drained while the next tile's
// mainloop runs.
#pragma once

#include <cuda_bf16.h>

#include <algorithm>
#include <cstdint>

#include <cute/arch/copy_sm90_tma.hpp>

#include "cuda/gemm/backward/mainloop.cuh"
#include "cuda/gemm/common/copy_rows_bulk.cuh"
#include "cuda/gemm/common/epilogue_lane.cuh"
#include "cuda/gemm/common/smem_descriptor.cuh"
#include "cuda/gemm/common/tile_handoff.cuh"
#include "cuda/packed_values.cuh"

namespace moefuse::gemm::bwd {

static_assert(kTileRowBytes == kBlockN * 2, "a buffer row is one bf16 tile row");

// Consumer side: part kPart of warpgroup `slab`'s 64 × N accumulators (kAcc = N / 2 a thread) as
// T (a part is at most kRowBytes of a row: columns [kPart · kRowBytes / sizeof(T), ...) of the
// tile) into the buffer's rows 64·slab .. 64·slab + 63, kPitch bytes apart.
template <class T, int kPart, int kPitch, int kRowBytes, int kAcc>
__device__ __forceinline__ void stage_part(const float (&acc)[kAcc], uint8_t* tile, int slab) {
  constexpr int kJ = std::min(kAcc / 4, kRowBytes / int{sizeof(T)} / 8);  // column octets
  static_assert(kJ * 8 * int{sizeof(T)} + 16 <= kPitch, "a part's row fits the pitch");
  const AccPosition pos = AccPosition::of_thread();
  uint8_t* row0 = tile + (slab * (kBlockM / 2) + pos.row) * kPitch;
#pragma unroll
  for (int jj = 0; jj < kJ; ++jj) {
    const int j = kPart * kJ + jj;
#pragma unroll
    for (int h = 0; h < 2; ++h)
      cuda::store_pair(
          reinterpret_cast<T*>(row0 + 8 * h * kPitch + (8 * jj + pos.col) * int{sizeof(T)}),
          acc[4 * j + 2 * h], acc[4 * j + 2 * h + 1]);
  }
}

// kBulk: the part is drained by bulk copies (drain_output), which read the buffer through the
// async proxy, so the writes are fenced for it before the publish. kRowBytes: a part's bytes of
// a tile row (the buffer's row, kTileRowBytes, or a whole fp32 row, kWholeRowBytesF32).
template <class T, int kPart, int kPitch, bool kBulk = false, int kRowBytes = kTileRowBytes,
          int kAcc>
__device__ __forceinline__ void send_part(const float (&acc)[kAcc], TileHandoff& h, int slab) {
  h.acquire();
  assume_shared(h.tile);
  stage_part<T, kPart, kPitch, kRowBytes>(acc, h.tile, slab);
  if constexpr (kBulk) cute::tma_store_fence();
  h.publish();
}

// Consumer side of one 128 × 256 tile of a plain output (drain_output): fp32 in two parts, or
// bf16 in one; all but an fp32 tile's part 0 are drained by bulk copies, and that one too with
// accumulate (bulk reduce-adds).
__device__ __forceinline__ void hand_off_tile(const float (&acc)[128], TileHandoff& h, int slab,
                                              bool fp32, bool accumulate = false) {
  if (fp32) {
    if (accumulate) send_part<float, 0, kTilePitchF32, true>(acc, h, slab);
    else send_part<float, 0, kTilePitchF32>(acc, h, slab);
    send_part<float, 1, kTilePitchF32, true>(acc, h, slab);
  } else {
    send_part<__nv_bfloat16, 0, kTilePitch, true>(acc, h, slab);
  }
}

__device__ __forceinline__ int handoff_parts(bool fp32) { return fp32 ? 2 : 1; }

// Epilogue side of one tile: `drain(part, tile)` between the waits, by all 96 threads.
template <class Drain>
__device__ __forceinline__ void receive_tile(TileHandoff& h, int parts, Drain&& drain) {
  for (int part = 0; part < parts; ++part) {
    h.wait_full();
    drain(part, static_cast<const uint8_t*>(h.tile));
    h.release();
  }
}

// Epilogue side: buffer rows [0, 128) → dst rows row_first + r (< row_end), bytes [byte_first,
// byte_first + 512) of each row clipped to row_bytes (a multiple of 16). Warp w takes rows w,
// w + 3, ..., lane l the 16-byte piece l: a warp writes one 512-byte row segment, kBatch rows'
// loads in flight together.
__device__ __forceinline__ void drain_rows(const uint8_t* tile, int tile_pitch, uint8_t* dst,
                                           int64_t row_pitch_bytes, int row_first, int row_end,
                                           int byte_first, int row_bytes) {
  constexpr int kBatch = 4;
  const EpilogueLane me = EpilogueLane::of_thread();
  const int byte = byte_first + 16 * me.lane;
  if (byte >= row_bytes) return;  // no barrier below: idle lanes may leave
  const int rows = min(kBlockM, row_end - row_first);
  for (int r0 = me.warp; r0 < rows; r0 += kEpilogueWarps * kBatch) {
    uint4 v[kBatch];
#pragma unroll
    for (int i = 0; i < kBatch; ++i) {
      const int r = r0 + kEpilogueWarps * i;
      if (r < rows) v[i] = *reinterpret_cast<const uint4*>(tile + r * tile_pitch + 16 * me.lane);
    }
#pragma unroll
    for (int i = 0; i < kBatch; ++i) {
      const int r = r0 + kEpilogueWarps * i;
      if (r < rows)
        *reinterpret_cast<uint4*>(dst + (row_first + r) * row_pitch_bytes + byte) = v[i];
    }
  }
}

// A plain output tile: part `part` of `parts` of the tile at (row_first, n0) of a row-major D
// with row pitch `ld` elements, `n` valid columns, rows < row_end; fp32 (kAdd possible) or bf16.
// A part drained while the next tile's mainloop runs (a bf16 tile, an fp32 tile's last part)
// goes by bulk copies; part 0 of a two-part fp32 tile, whose drain the consumers wait for before
// they write part 1, goes through the registers (drain_rows), which finish sooner. Run 17
// (gemm-backward A/B against register drains only): bf16 tiles 1-3% faster (FC1 dgrad, the
// wgrads' bf16 out), fp32 wgrads 1.5-4% faster; bulk copies for part 0 as well made the fp32
// wgrads 1-2% slower wherever K is short (qwen3, gpt-oss, deepseek). The FP8 wgrad's one-part
// fp32 tile by bulk copies instead of registers: its qwen3 stages 0.965-0.969× the time, gpt-oss
// 0.995-1.006× (run 42, call 1, two rounds). The accumulate's parts go by bulk reduce-adds,
// the add done in L2: run 28 (call 5, the layer's step with fp32-accumulate) measured them
// 0.88 / 0.94 / 0.95× the time of the register read-add-write (gpt-oss / qwen3 / deepseek),
// which had the old D prefetched into L2 a tile ahead; the reduce-adds with that prefetch kept
// were 0.96-0.98×, so it went.
template <bool kAdd>
__device__ __forceinline__ void drain_output(const uint8_t* tile, int part, int parts, void* d,
                                             bool fp32, int64_t ld, int n, int row_first,
                                             int row_end, int n0) {
  const int elt = fp32 ? 4 : 2;
  uint8_t* dst = static_cast<uint8_t*>(d);
  const int byte_first = n0 * elt + part * kTileRowBytes;
  const int pitch = tile_pitch(fp32);
  if (fp32 && !kAdd && part == 0 && parts == 2)
    drain_rows(tile, pitch, dst, ld * elt, row_first, row_end, byte_first, n * elt);
  else
    copy_rows_bulk<kAdd>(tile, pitch, dst + row_first * ld * elt + byte_first, ld * elt,
                         min(kBlockM, row_end - row_first),
                         min(kTileRowBytes, n * elt - byte_first));
}

}  // namespace moefuse::gemm::bwd
