// The layer's memory plan: where each buffer lives in the caller's cache and workspace.
//
// Three byte ranges (four with a low-precision recipe), each slice 256-byte aligned:
//   cache      [cache_bytes]      written by forward, read by backward (per layer)
//   workspace  [common | forward scratch ∪ backward scratch]
//   fp8        [fp8_weight_bytes] the quantised expert weights (MoeLayerWeights::fp8): FP8
//                                 codes and scales, or MXFP8's quantise-dequantised bf16 copies
// The forward and backward scratch start at the same offset (after the common part): a step
// runs them one after the other on the main stream, and each call joins its second stream before
// it returns, so no buffer of one is live during the other. Inside one call every buffer is
// distinct, so second-stream work never races the main stream.
// Pure host arithmetic, tested on the CPU (tests/cpu/layer_plan_test.cpp).
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <vector>

#include "moefuse/config.h"
#include "moefuse/layer.h"
#include "moefuse/tensor.h"
#include "moefuse/workspace.h"

namespace moefuse::layer {

enum class Region : uint8_t { kNone, kCache, kWorkspace, kFp8Weights };

// Every precision caches FC1's pre-activation unless asked not to (the FP8 GEMM writes it from
// its epilogue like the BF16 one); recomputing trades R·fc1·2 bytes of cache per layer for one
// FC1 GEMM in the backward (FP8: re-quantise x, then the FP8 GEMM).
inline bool recomputes_pre(const MoeConfig&, const LayerOptions& options) {
  return options.recompute_pre;
}

// The bf16 fused forward's FC1 reads x through token_of_row itself (cp.async rows, the gather
// variant of grouped_gemm) instead of a permuted copy (TMA) when FC1 is narrow: the permute
// moves (1 + k)·T·H·2 bytes whatever the width while FC1's time grows with it, and the gather
// variant (saving pre in its consumers' epilogue) costs FC1 a few percent. Run 20 (H200,
// T 16384, layer forward, three interleaved rounds of each rule): fc1 = 1536 (qwen3) 0.981× the
// time with the gather, 4096 (deepseek slice) 0.999× (its forward+backward 0.993×), 5760
// (gpt-oss) 1.013×; at 28672 (mixtral) the gather-fused FC1 alone is slower than permute + FC1.
inline constexpr int64_t kGatherMaxFc1Width = 4096;
inline bool fc1_gathers_x(const MoeConfig& c, const LayerOptions& options) {
  return options.mode == LayerMode::kFused && c.precision != PrecisionRecipe::kFP8Blockwise &&
         c.fc1_width() <= kGatherMaxFc1Width;
}

// The bf16 layer's FC2 dgrad sums d_b2 from dys (Fc2DgradArgs::d_b2), fused with dp's b2 term in
// one pass over dys (scratch bias_partial): gpt-oss-120b's two passes took 117 + 100 µs, the one
// 129 (session 35). The FP8 and MXFP8 dgrads read quantised dys, so their d_b2 is summed from the
// bf16 dys apart (backward.cpp).
inline bool fc2_dgrad_sums_d_b2(const MoeConfig& c) {
  return c.expert_bias && c.precision == PrecisionRecipe::kBF16;
}
inline bool fuses_bias_terms(const MoeConfig& c, const LayerOptions& options) {
  return fc2_dgrad_sums_d_b2(c) && options.mode == LayerMode::kFused;
}

// A byte range in one region; kNone (bytes 0) means "this configuration has no such buffer".
struct Slice {
  Region region = Region::kNone;
  size_t offset = 0;
  size_t bytes = 0;
  bool present() const { return region != Region::kNone; }
};

// The shared expert's FP8 buffers (kFP8Blockwise with a shared expert): the row-wise e4m3
// operands of its GEMMs (codes and the GEMM's K-major 1x128 scales; one row-major scale buffer a
// pass, which each quantisation uses in turn on the second stream), the column-wise ones of its
// wgrads (absent with bf16_wgrad), and its weights in the FP8 weight region.
struct SharedFp8Slices {
  Slice x, x_scales, act, act_scales, scales_rows;               // forward scratch
  Slice x_bwd, x_scales_bwd;                                     // backward, recompute_pre only
  Slice dy, dy_scales, dpre, dpre_scales, scales_rows_bwd;       // backward scratch
  Slice dy_t, dy_t_scales, act_t, act_t_scales, dpre_t, dpre_t_scales, x_t, x_t_scales;
  Slice w1, w1_scales, w2, w2_scales, w1t, w1t_scales, w2t, w2t_scales;  // weight region
};

struct Plan {
  int64_t tokens = 0;  // T
  int64_t rows = 0;    // R = T·k: one row per assignment, no padding (align 1)
  LayerMode mode = LayerMode::kFused;

  // cache: routing metadata and, unless recomputed, the pre-activations
  Slice logits, expert_idx, probs, counts, offsets, row_of, token_of_row, row_prob;
  Slice shared_offsets;  // {0, T}: the shared expert as a one-expert grouped GEMM
  Slice pre, shared_pre;  // where forward leaves them (workspace when recomputed; fused
                          // forward with recompute_pre writes none)
  // workspace, both passes
  Slice router_gemm, router_topk, maps, aux_f, aux_P;
  // forward scratch (MXFP8: x_qdq, x quantise-dequantised along H, which FC1 reads instead of
  // x; act is quantise-dequantised in place)
  Slice xs, act, ys, shared_act, shared_y, x_qdq;
  // forward scratch, FP8: E4M3 codes and their K-major 1x128 scales (xs's from the permute,
  // act's from FC1's epilogue)
  Slice xs_fp8, xs_scales, act_fp8, act_scales;
  // the FP8 weight region: 128x128-block quantised w1 [E,fc1,H] and w2 [E,H,F], their scales,
  // and their transposes w1t [E,H,fc1], w2t [E,F,H] (the dgrads' B operands)
  Slice w1_fp8, w1_scales, w2_fp8, w2_scales, w1t_fp8, w1t_scales, w2t_fp8, w2t_scales;
  // the MXFP8 weight region: w1 and w2 quantise-dequantised along each GEMM's K, bf16 in their
  // own layouts: along H and F for the forward, along fc1 and H (down the rows) for the dgrads
  Slice w1_qdq, w2_qdq, w1_qdq_dgrad, w2_qdq_dgrad;
  // backward scratch
  Slice pre_bwd, shared_pre_bwd;  // = pre / shared_pre when cached, else recomputed here
  Slice dys, dpre, act_bwd, d_row_prob, d_probs, dxs, d_logits, xs_bwd;
  // backward scratch, FP8: row-wise e4m3 operands of the dgrads (codes and the GEMM's K-major
  // scales; d_pre's also the quantiser's row-major ones, dys's come from dy's permute +
  // quantise); column-wise grouped operands of the wgrads ([N, 128·G] codes, [G, N] scales, G =
  // fp8_colwise_groups(R, E); dys and dW1's x gathered from the tokens by their quantiser, so no
  // permuted bf16 xs, and bf16 dys only with expert bias; with config.bf16_wgrad none of these,
  // but bf16 dys and xs_bwd as the bf16 layer has them); with recompute_pre, the recompute's
  // xs codes and scales (absent when pre is cached).
  Slice dys_fp8, dys_scales, dpre_fp8, dpre_scales_rows, dpre_scales;
  Slice dys_t, dys_t_scales, act_t, act_t_scales, dpre_t, dpre_t_scales, xs_t, xs_t_scales;
  Slice xs_fp8_bwd, xs_scales_bwd;
  // backward scratch, MXFP8: the dgrads' row-wise operands (the wgrads' column-wise ones are
  // quantise-dequantised in place: dys, scaled_act, d_pre after their other readers, xs_bwd)
  // and, with recompute_pre, the recompute's x rows
  Slice dys_qdq, dpre_qdq, xs_qdq_bwd;
  Slice dp_scratch;  // fused: FC2 dgrad's dp partials [R, blocks] fp32 (FP8: the FP8 dgrad's
                     // blocks); unfused: its g [R,F] bf16
  Slice bias_partial;  // fuses_bias_terms: FC2 dgrad's b2 dots [pieces, R] fp32
  // expert_bias: the bias gradients' per-unit sums [fc2_dgrad_d_b2_units(R, E), max(H, fc1)]
  // fp32, for d_b2 (H columns) and then d_b1 (fc1), one after the other on the main stream
  Slice bias_units;
  Slice shared_dpre, shared_act_bwd, shared_dx, shared_g;  // shared_g: unfused only
  SharedFp8Slices shared_fp8;  // FP8: the shared expert's operands and weights (no bf16 act)

  size_t cache_bytes = 0;
  size_t workspace_bytes = 0;
  size_t fp8_weight_bytes = 0;
  std::vector<LayerBuffer> buffers;  // every present slice, named, for reports
};

Plan make_plan(const MoeConfig& config, const LayerOptions& options, int64_t tokens);

// The caller's regions a slice may live in.
struct Regions {
  Workspace cache, workspace, fp8;
};

// Device pointer of a slice (nullptr when absent).
void* slice_ptr(const Slice& s, const Regions& regions);

// A contiguous cuda view of a slice (an empty view when absent).
TensorView slice_view(const Slice& s, const Regions& regions, DType dtype,
                      std::initializer_list<int64_t> shape);

}  // namespace moefuse::layer
