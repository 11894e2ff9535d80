// The permute kernel's launch shape (permute.cu), for the benchmark's sweep: `moefuse-bench
// dispatch` times `permute` and `permute_quantize_fp8` as the library runs them and a few other
// shapes next to them, so one GPU run shows whether another shape reaches the copy-bandwidth
// target (issue 4: 0.85). The defaults are the library's choice: in run 11's sweep
// (bench/results/2026-11-29_h200_run11_dispatch.json) 8 KiB stages at as many CTAs as fit were
// the best or within 1% of it on every preset for the copy (qwen3 0.88 of copy with 2 rows a
// stage, where 32 KiB stages of 8 rows gave 0.83); the copy now holds at least two rows a stage
// (kPermuteCopyTuning).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "moefuse/tensor.h"

namespace moefuse::cuda {

struct PermuteTuning {
  int64_t stage_bytes = 8 * 1024;  // x rows a stage aims to hold (at least one row, at most 8)
  int64_t min_rows = 1;            // and at least this many rows, whatever their size
  // ... and at least this many where a row is not whole 256-byte units of memory
  int64_t split_unit_min_rows = 1;
  int ctas_per_sm = 0;  // one-warp CTAs an SM; 0: as many as fit
};

// permute's shape: 8 KiB stages of at least two rows, four where a row is not whole 256-byte
// units (fewer where they would not fit). With its bulk copies hinted evict_first (permute.cu),
// session 33's three interleaved rounds (of copy): gpt-oss's 5760-byte rows two a stage
// 0.848-0.850 against one 0.837-0.839 (call 9; call 8: 0.850-0.855 against 0.842-0.847),
// deepseek's 14 KiB rows level (0.875 / 0.871-0.876), mixtral's 8 KiB rows 0.875-0.881 against
// 0.882-0.883; qwen3's 4 KiB rows two a stage either way (0.90; four 0.87).
// The four: gpt-oss's 5760-byte rows (22.5 units) are the one preset row that splits 256-byte
// units, and they ran 4% slower a byte than rows of 5120 to 6144 bytes that do not (session 36,
// call 1: 0.853 of copy against 0.880-0.890). Writing each split unit whole from one block did
// not recover it (call 2); four rows a stage took gpt-oss from 0.852-0.856 to 0.862-0.864
// (call 6, three rounds; in the same runs two rows 0.856-0.859, three 0.856-0.864), while
// qwen3's whole-unit rows run best at two (0.91; four 0.88-0.89). Measured, not derived.
inline constexpr PermuteTuning kPermuteCopyTuning{
    .stage_bytes = 8 * 1024, .min_rows = 2, .split_unit_min_rows = 4};

// Rows of x a stage holds for a row of `hidden` bf16 under `tuning`: the launch shape that
// actually runs (tunings that round to the same rows are the same launch).
int64_t permute_stage_rows(int64_t hidden, const PermuteTuning& tuning);

// permute (moefuse/dispatch.h) with the given launch shape; the same validation and results.
void permute_tuned(const TensorView& x, const TensorView& row_of, const TensorView& token_of_row,
                   const TensorView& xs, const TensorView& health, const PermuteTuning& tuning,
                   cudaStream_t stream);

// permute_quantize_fp8 (moefuse/dispatch.h) likewise: stage_bytes of x rows a stage (each token
// also has its code row in each of the two code buffers), ctas_per_sm one-warp CTAs an SM.
void permute_quantize_fp8_tuned(const TensorView& x, const TensorView& row_of,
                                const TensorView& token_of_row, const TensorView& xs_fp8,
                                const TensorView& xs_scales, const TensorView& health,
                                const PermuteTuning& tuning, cudaStream_t stream);

}  // namespace moefuse::cuda
