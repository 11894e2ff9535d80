// How the two consumer warpgroups of the bf16 kernels (forward, dgrad) split a 128 × 256 tile,
// chosen per tile from how much of it holds data.
//
//   kFull:    warpgroup s takes rows 64·s .. +63 × all 256 columns (wgmma m64n256).
//   kRowHalf: the tile holds at most 64 rows (an expert's last m-block): both warpgroups take
//             rows 0-63, warpgroup s columns 128·s .. +127 (m64n128).
//   kColHalf: the tile holds at most 128 columns (the last n-block when N % 256 is in (0, 128]):
//             warpgroup s takes rows 64·s .. +63 × columns 0-127 (m64n128).
// A half tile costs half a full tile's MMA time instead of a full tile's time for at most half
// the data. Both kinds pay off at the presets' shapes: with ~512 rows an expert (gpt-oss and the
// deepseek slice at T = 16384, uniform routing) about half the experts end in a tile of at most
// 64 rows, and gpt-oss's N = 2880 ends in a 64-column n-block (5760: one of 128). The stages are
// filled the same way for every kind; the producer does not know it.
//
// Pure arithmetic, unit-tested on the CPU (tests/cpu/gemm_tile_kind_test.cpp).
#pragma once

#include <type_traits>

#include "cuda/gemm/tile_scheduler.h"  // MOEFUSE_HOST_DEVICE

namespace moefuse::gemm {

enum class TileKind { kFull, kRowHalf, kColHalf };

// rows, cols: how many of the tile's block_m rows and block_n columns hold data (at least 1).
// A tile with both few rows and few columns is a kRowHalf one (a warpgroup's columns may then
// all lie past N; it multiplies them anyway, as a full tile would).
MOEFUSE_HOST_DEVICE constexpr TileKind tile_kind(int rows, int cols, int block_m, int block_n) {
  if (rows <= block_m / 2) return TileKind::kRowHalf;
  if (cols <= block_n / 2) return TileKind::kColHalf;
  return TileKind::kFull;
}

// The part of the tile warpgroup `slab` computes: its first row and column, and its width.
struct SlabGeometry {
  int first_row;
  int first_col;
  int cols;
};

MOEFUSE_HOST_DEVICE constexpr SlabGeometry slab_geometry(TileKind kind, int slab, int block_m,
                                                         int block_n) {
  const int half_m = block_m / 2, half_n = block_n / 2;
  switch (kind) {
    case TileKind::kRowHalf: return {.first_row = 0, .first_col = slab * half_n, .cols = half_n};
    case TileKind::kColHalf: return {.first_row = slab * half_m, .first_col = 0, .cols = half_n};
    case TileKind::kFull: break;
  }
  return {.first_row = slab * half_m, .first_col = 0, .cols = block_n};
}

// f(std::integral_constant<TileKind, kind>{}): one instantiation of the tile's code per kind.
template <class F>
MOEFUSE_HOST_DEVICE void with_tile_kind(TileKind kind, F&& f) {
  using K = TileKind;
  if (kind == K::kRowHalf) f(std::integral_constant<K, K::kRowHalf>{});
  else if (kind == K::kColHalf) f(std::integral_constant<K, K::kColHalf>{});
  else f(std::integral_constant<K, K::kFull>{});
}

}  // namespace moefuse::gemm
