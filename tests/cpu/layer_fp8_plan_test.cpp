// The FP8 layer on the host (no GPU): its memory plan (the FP8 scratch of forward and backward,
// the weight region's exact sizes, the pre-activation cached as in bf16 unless recompute_pre),
// the config and argument checks, and the C ABI's FP8 entry points.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <string>

#include "cuda/layer/layer_args.h"
#include "cuda/layer/plan.h"
#include "moefuse/error.h"
#include "moefuse/grouped_gemm_fp8.h"
#include "moefuse/layer.h"
#include "moefuse/moefuse.h"
#include "layer_plan_helpers.h"
#include "ref_test_helpers.h"

namespace moefuse {
namespace {

using test::align256;
using test::find_buffer;

using test::expect_invalid;

MoeConfig fp8(MoeConfig c) {
  c.precision = PrecisionRecipe::kFP8Blockwise;
  c.expert_bias = false;  // the plans below compare against bias-free bf16 plans
  return c;
}

TEST(LayerFp8Plan, WeightRegionHoldsE4m3WeightsAndBlockScales) {
  for (auto name : preset_names()) {
    SCOPED_TRACE(std::string(name));
    const MoeConfig c = fp8(preset(name));
    const size_t E = c.num_experts, H = c.hidden, F = c.ffn, fc1 = c.fc1_width();
    const size_t gH = fp8_scale_groups(c.hidden), gF = fp8_scale_groups(c.ffn),
                 g1 = fp8_scale_groups(c.fc1_width());
    // w1, w2 and their transposes (the dgrads' operands: the same bytes, transposed); the
    // shared expert's likewise, as one expert (deepseek)
    size_t want = 2 * (align256(E * fc1 * H) + align256(E * g1 * gH * 4) + align256(E * H * F) +
                       align256(E * gH * gF * 4));
    if (c.shared_expert_ffn > 0) {
      const size_t sF = c.shared_expert_ffn, s1 = shared_expert_config(c).fc1_width();
      const size_t gS = fp8_scale_groups(sF), gS1 = fp8_scale_groups(s1);
      want += 2 * (align256(s1 * H) + align256(gS1 * gH * 4) + align256(H * sF) +
                   align256(gH * gS * 4));
    }
    const LayerMemoryPlan p = layer_memory_plan(c, {}, 4096);
    EXPECT_EQ(p.fp8_weight_bytes, want);
    EXPECT_EQ(layer_memory_plan(c, {}, 1).fp8_weight_bytes, want) << "independent of T";
    EXPECT_EQ(layer_memory_plan(preset(name), {}, 4096).fp8_weight_bytes, 0u) << "bf16";
    size_t in_region = 0;
    for (const auto& b : p.buffers)
      if (b.region == LayerRegion::kFp8Weights) {
        EXPECT_EQ(b.offset % 256, 0u) << b.name;
        EXPECT_LE(b.offset + b.bytes, p.fp8_weight_bytes) << b.name;
        in_region += align256(b.bytes);
      }
    EXPECT_EQ(in_region, want);
  }
}

TEST(LayerFp8Plan, ForwardScratchHoldsCodesAndKMajorScales) {
  const MoeConfig c = fp8(preset("deepseek-v3"));
  for (int64_t T : {1, 333, 16384}) {
    SCOPED_TRACE("T=" + std::to_string(T));
    const size_t R = T * c.top_k, H = c.hidden, F = c.ffn;
    const size_t cols = fp8_scale_rows(static_cast<int64_t>(R));
    const LayerMemoryPlan p = layer_memory_plan(c, {}, T);
    struct Want {
      const char* prefix;
      size_t bytes;
    };
    for (const Want& w : {Want{"xs [R,H] e4m3", R * H},
                          Want{"xs_scales", fp8_scale_groups(c.hidden) * cols * 4},
                          Want{"act [R,F] e4m3", R * F},
                          Want{"act_scales [F/128,R]", fp8_scale_groups(c.ffn) * cols * 4}}) {
      const LayerBuffer* b = find_buffer(p, w.prefix);
      ASSERT_NE(b, nullptr) << w.prefix;
      EXPECT_EQ(b->region, LayerRegion::kWorkspaceForward) << w.prefix;
      EXPECT_EQ(b->bytes, w.bytes) << w.prefix;
      EXPECT_LE(b->offset + b->bytes, p.workspace_bytes) << w.prefix;
    }
    EXPECT_EQ(find_buffer(p, "xs [R,H] bf16"), nullptr)
        << "no bf16 xs in the FP8 layer: the forward quantises x in its permute, and dW1's "
           "column-wise copy gathers x";
    EXPECT_EQ(find_buffer(p, "act [R,F] bf16"), nullptr)
        << "no bf16 act in the FP8 layer: FC1's epilogue writes FC2's E4M3 operand";
    EXPECT_EQ(find_buffer(p, "act_scales [R,"), nullptr) << "nor row-major act scales";
  }
}

// The FP8 backward's scratch against formulas written out here (not the library's helpers):
// row-wise codes with K-major scales for dys (K = H; quantised from dy, so neither row-major
// scales nor, without expert bias, a bf16 dys) and d_pre (K = fc1; its pass writes the
// column-wise copy and K-major scales together, row-major scales only with bf16 wgrads);
// column-wise copies of dys, p·act, d_pre and xs with G = (R + 127 E) / 128 groups of 128 rows
// (every expert's last group may be short: at most E partial groups); with recompute_pre, the
// recompute's xs codes and K-major scales (no bf16 xs: dW1's copy gathers x).
TEST(LayerFp8Plan, BackwardScratchHoldsRowAndColumnWiseOperands) {
  for (auto name : preset_names()) {
    MoeConfig bf = preset(name);
    bf.expert_bias = false;
    const MoeConfig c = fp8(bf);
    for (int64_t T : {1, 333, 16384}) {
      for (bool recompute : {false, true}) {
        SCOPED_TRACE(std::string(name) + " T=" + std::to_string(T) +
                     (recompute ? " recompute" : " cached"));
        const size_t E = c.num_experts, R = T * c.top_k, H = c.hidden, F = c.ffn,
                     fc1 = c.fc1_width();
        auto g = [](size_t n) { return (n + 127) / 128; };
        const size_t cols = (R + 3) / 4 * 4, G = (R + 127 * E) / 128;
        const LayerOptions o{.recompute_pre = recompute};
        const LayerMemoryPlan p = layer_memory_plan(c, o, T);
        struct Want {
          const char* prefix;
          size_t bytes;
        };
        for (const Want& w :
             {Want{"dys [R,H] e4m3", R * H}, Want{"dys_scales [H/128,R]", g(H) * cols * 4},
              Want{"d_pre [R,fc1] e4m3", R * fc1},
              Want{"d_pre_scales [fc1/128,R]", g(fc1) * cols * 4},
              Want{"dys_t [H,128G]", H * 128 * G}, Want{"dys_t_scales", G * H * 4},
              Want{"scaled_act_t [F,128G]", F * 128 * G}, Want{"scaled_act_t_scales", G * F * 4},
              Want{"d_pre_t [fc1,128G]", fc1 * 128 * G}, Want{"d_pre_t_scales", G * fc1 * 4},
              Want{"xs_t [H,128G]", H * 128 * G}, Want{"xs_t_scales", G * H * 4},
              Want{"dp_partial", R * g(F) * 4}}) {
          const LayerBuffer* b = find_buffer(p, w.prefix);
          ASSERT_NE(b, nullptr) << w.prefix;
          EXPECT_EQ(b->region, LayerRegion::kWorkspaceBackward) << w.prefix;
          EXPECT_EQ(b->bytes, w.bytes) << w.prefix;
        }
        EXPECT_EQ(find_buffer(p, "dys_scales [R,"), nullptr)
            << "dy's permute writes K-major scales";
        EXPECT_EQ(find_buffer(p, "d_pre_scales [R,"), nullptr)
            << "d_pre's row+column pass writes K-major scales";
        MoeConfig bf16_wgrad = c;
        bf16_wgrad.bf16_wgrad = true;
        const LayerBuffer* rows =
            find_buffer(layer_memory_plan(bf16_wgrad, o, T), "d_pre_scales [R,");
        ASSERT_NE(rows, nullptr) << "bf16 wgrads: d_pre's row-wise pass, row-major scales first";
        EXPECT_EQ(rows->bytes, R * g(fc1) * 4);
        EXPECT_EQ(find_buffer(p, "dys [R,H] bf16"), nullptr) << "only the bias terms read bf16 dys";
        MoeConfig with_bias = c;
        with_bias.expert_bias = true;
        const LayerBuffer* dys = find_buffer(layer_memory_plan(with_bias, o, T), "dys [R,H] bf16");
        ASSERT_NE(dys, nullptr) << "expert bias: dp's and d_b2's bias terms read bf16 dys";
        EXPECT_EQ(dys->bytes, R * H * 2);
        const layer::Plan lp = layer::make_plan(c, o, T);
        if (!recompute) {
          EXPECT_EQ(find_buffer(p, "pre [R,fc1] bf16 (recomputed)"), nullptr);
          EXPECT_FALSE(lp.xs_fp8_bwd.present());
          EXPECT_FALSE(lp.xs_scales_bwd.present());
          EXPECT_FALSE(lp.xs_bwd.present());  // dW1's column-wise copy gathers x
          continue;
        }
        const LayerBuffer* pre = find_buffer(p, "pre [R,fc1] bf16 (recomputed)");
        ASSERT_NE(pre, nullptr);
        EXPECT_EQ(pre->bytes, R * fc1 * 2);
        // The recompute's codes and K-major scales, its own buffers; no bf16 xs (dW1's
        // column-wise copy gathers x).
        EXPECT_EQ(lp.xs_fp8_bwd.bytes, R * H);
        EXPECT_EQ(lp.xs_scales_bwd.bytes, g(H) * cols * 4);
        EXPECT_FALSE(lp.xs_bwd.present());
      }
      // The bf16 plan has none of it.
      const LayerMemoryPlan b = layer_memory_plan(bf, {.recompute_pre = true}, T);
      EXPECT_EQ(find_buffer(b, "dys [R,H] e4m3"), nullptr);
      EXPECT_EQ(find_buffer(b, "xs_t"), nullptr);
    }
  }
}

// config.bf16_wgrad: the dgrads' row-wise FP8 operands stay; the wgrads' column-wise ones give
// way to what the bf16 wgrads read, bf16 dys and x permuted (xs_bwd), as in the bf16 plan.
TEST(LayerFp8Plan, Bf16WgradsReadBf16DysAndPermutedX) {
  for (auto name : preset_names()) {
    MoeConfig c = fp8(preset(name));
    c.bf16_wgrad = true;
    for (int64_t T : {1, 16384}) {
      for (bool recompute : {false, true}) {
        SCOPED_TRACE(std::string(name) + " T=" + std::to_string(T) +
                     (recompute ? " recompute" : " cached"));
        const size_t R = T * c.top_k, H = c.hidden;
        const LayerOptions o{.recompute_pre = recompute};
        const LayerMemoryPlan p = layer_memory_plan(c, o, T);
        for (const char* gone : {"dys_t", "scaled_act_t", "d_pre_t", "xs_t"})
          EXPECT_EQ(find_buffer(p, gone), nullptr) << gone;
        for (const char* kept : {"dys [R,H] e4m3", "d_pre [R,fc1] e4m3"})
          EXPECT_NE(find_buffer(p, kept), nullptr) << kept;
        const LayerBuffer* dys = find_buffer(p, "dys [R,H] bf16");
        ASSERT_NE(dys, nullptr);
        EXPECT_EQ(dys->bytes, R * H * 2);
        const layer::Plan lp = layer::make_plan(c, o, T);
        EXPECT_EQ(lp.xs_bwd.bytes, R * H * 2);
        EXPECT_EQ(lp.xs_bwd.region, layer::Region::kWorkspace);
      }
    }
  }
}

// The FP8 FC1 GEMM writes the pre-activation from its epilogue: by default the cache holds it
// (R·fc1 bf16, plus the shared expert's [T, shared_fc1]) exactly as the bf16 plan's, and the
// backward reads it from there; with recompute_pre the cache is the bf16 recompute cache
// (metadata only) and the backward recomputes pre into its scratch.
TEST(LayerFp8Plan, PreActivationIsCachedUnlessRecomputeIsAsked) {
  for (auto name : preset_names()) {
    SCOPED_TRACE(std::string(name));
    MoeConfig bf = preset(name);
    bf.expert_bias = false;
    const MoeConfig c = fp8(bf);
    const int64_t T = 1000;
    const size_t R = T * c.top_k, fc1 = c.fc1_width();
    const size_t shared_pre =
        c.shared_expert_ffn > 0 ? align256(T * shared_expert_config(c).fc1_width() * 2) : 0;

    const LayerMemoryPlan cached = layer_memory_plan(c, {}, T);
    const LayerMemoryPlan recomputed = layer_memory_plan(c, {.recompute_pre = true}, T);
    EXPECT_EQ(cached.cache_bytes, layer_memory_plan(bf, {}, T).cache_bytes);
    EXPECT_EQ(recomputed.cache_bytes, layer_memory_plan(bf, {.recompute_pre = true}, T).cache_bytes);
    EXPECT_EQ(cached.cache_bytes, recomputed.cache_bytes + align256(R * fc1 * 2) + shared_pre)
        << "the cache grows by the pre-activation (and the shared expert's)";
    const LayerBuffer* pre = find_buffer(cached, "pre [R,fc1] bf16");
    ASSERT_NE(pre, nullptr);
    EXPECT_EQ(pre->region, LayerRegion::kCache);
    EXPECT_EQ(pre->bytes, R * fc1 * 2);
    EXPECT_EQ(find_buffer(cached, "pre [R,fc1] bf16 (recomputed)"), nullptr);
    for (const auto& buf : recomputed.buffers)
      EXPECT_FALSE(buf.region == LayerRegion::kCache && buf.name.rfind("pre", 0) == 0)
          << buf.name;
    ASSERT_NE(find_buffer(recomputed, "pre [R,fc1] bf16 (recomputed)"), nullptr);
    // The backward scratch loses the recomputed pre and the recompute's codes.
    EXPECT_LE(cached.workspace_bytes, recomputed.workspace_bytes);

    // The views the layer hands the kernels: FC1 writes v.pre, the FC2 dgrad reads pre_bwd.
    const layer::Plan lp = layer::make_plan(c, {}, T);
    EXPECT_EQ(lp.pre.region, layer::Region::kCache);
    EXPECT_EQ(lp.pre_bwd.offset, lp.pre.offset);
    EXPECT_EQ(lp.pre_bwd.region, layer::Region::kCache);
    EXPECT_FALSE(layer::recomputes_pre(c, {.recompute_pre = false}));
    EXPECT_TRUE(layer::recomputes_pre(c, {.recompute_pre = true}));
  }
}

// The shared expert (deepseek) runs the FP8 recipe on its own buffers, against formulas written
// out here: forward, x's codes and K-major scales (with one row-major scale buffer) and FC1's
// E4M3 act with its scales, no bf16 act; backward, dy's and d_pre's codes and scales, x's again
// only with recompute_pre, the column-wise copies of dy, act, d_pre and x with
// G = ceil(T / 128) groups (one expert) unless bf16_wgrad; none of it in bf16 or MXFP8 plans.
TEST(LayerFp8Plan, SharedExpertHasItsOwnFp8Operands) {
  MoeConfig bf = preset("deepseek-v3");
  const MoeConfig c = fp8(bf);
  const size_t H = c.hidden, sF = c.shared_expert_ffn, s1 = shared_expert_config(c).fc1_width();
  auto g = [](size_t n) { return (n + 127) / 128; };
  for (int64_t T : {1, 333, 16384}) {
    for (bool recompute : {false, true}) {
      for (bool bf16_wgrad : {false, true}) {
        SCOPED_TRACE("T=" + std::to_string(T) + (recompute ? " recompute" : " cached") +
                     (bf16_wgrad ? " bf16_wgrad" : ""));
        MoeConfig cc = c;
        cc.bf16_wgrad = bf16_wgrad;
        const size_t cols = (T + 3) / 4 * 4, G = (T + 127) / 128;
        const LayerMemoryPlan p = layer_memory_plan(cc, {.recompute_pre = recompute}, T);
        struct Want {
          const char* name;
          LayerRegion region;
          size_t bytes;
          bool present;
        };
        const LayerRegion fwd = LayerRegion::kWorkspaceForward,
                          bwd = LayerRegion::kWorkspaceBackward;
        for (const Want& w : {
                 Want{"shared_x [T,H] e4m3", fwd, T * H, true},
                 Want{"shared_x_scales [H/128,T] fp32 (K-major)", fwd, g(H) * cols * 4, true},
                 Want{"shared_act [T,shared_F] e4m3", fwd, T * sF, true},
                 Want{"shared_act_scales", fwd, g(sF) * cols * 4, true},
                 Want{"shared_scales_rows [T,H/128]", fwd, T * g(H) * 4, true},
                 Want{"shared_act [T,shared_F] bf16", bwd, T * sF * 2, true},  // dW2's operand
                 Want{"shared_x [T,H] e4m3 (fp8 recompute)", bwd, T * H, recompute},
                 Want{"shared_dy [T,H] e4m3", bwd, T * H, true},
                 Want{"shared_dy_scales", bwd, g(H) * cols * 4, true},
                 Want{"shared_d_pre [T,shared_fc1] e4m3", bwd, T * s1, true},
                 Want{"shared_d_pre_scales", bwd, g(s1) * cols * 4, true},
                 // Row-major scale scratch: the recompute's and, with bf16 wgrads, dy's and
                 // d_pre's row-wise passes (else one pass writes each one's both copies).
                 Want{"shared_scales_rows [T,max", bwd, T * std::max(g(H), g(s1)) * 4,
                      recompute || bf16_wgrad},
                 Want{"shared_dy_t [H,128G]", bwd, H * 128 * G, !bf16_wgrad},
                 Want{"shared_act_t [shared_F,128G]", bwd, sF * 128 * G, !bf16_wgrad},
                 Want{"shared_d_pre_t [shared_fc1,128G]", bwd, s1 * 128 * G, !bf16_wgrad},
                 Want{"shared_x_t [H,128G]", bwd, H * 128 * G, !bf16_wgrad},
                 Want{"shared_x_t_scales", bwd, G * H * 4, !bf16_wgrad}}) {
          const LayerBuffer* b = find_buffer(p, w.name);
          if (!w.present) {
            EXPECT_EQ(b, nullptr) << w.name;
            continue;
          }
          ASSERT_NE(b, nullptr) << w.name;
          EXPECT_EQ(b->region, w.region) << w.name;
          EXPECT_EQ(b->bytes, w.bytes) << w.name;
        }
        for (const auto& b : p.buffers)  // FC1 writes E4M3 act: no bf16 act in the forward
          EXPECT_FALSE(b.region == fwd && b.name == "shared_act [T,shared_F] bf16") << b.name;
      }
    }
    for (PrecisionRecipe other : {PrecisionRecipe::kBF16, PrecisionRecipe::kMXFP8}) {
      MoeConfig o = bf;
      o.precision = other;
      const LayerMemoryPlan p = layer_memory_plan(o, {}, T);
      for (const char* gone : {"shared_x [T,H] e4m3", "shared_dy [T,H] e4m3", "shared_x_t"})
        EXPECT_EQ(find_buffer(p, gone), nullptr) << gone;
    }
  }
}

TEST(LayerFp8Args, WhatTheFp8PathCannotRunIsNamed) {
  MoeConfig c = fp8(preset("qwen3-30b-a3b"));
  layer::check_layer_config(c);  // the preset itself is fine
  expect_invalid([&] { layer_memory_plan(c, {.mode = LayerMode::kUnfused}, 16); },
                 "options.mode");
  expect_invalid([&] { MoeLayer layer(c, {.mode = LayerMode::kUnfused}); }, "options.mode");
  c.expert_bias = true;  // the FP8 epilogues add the expert biases (GPT-OSS runs FP8)
  layer::check_layer_config(c);
  c = fp8(preset("qwen3-30b-a3b"));
  c.hidden = 2040;  // a multiple of 8 (bf16 is fine) but not of 16
  expect_invalid([&] { layer::check_layer_config(c); }, "config.hidden");
  c = fp8(preset("qwen3-30b-a3b"));
  c.ffn = 776;
  expect_invalid([&] { layer::check_layer_config(c); }, "config.ffn");
  c.precision = PrecisionRecipe::kMXFP8;  // 776 is not a multiple of 32 either
  expect_invalid([&] { layer::check_layer_config(c); }, "config.ffn");
  c = fp8(preset("deepseek-v3"));
  c.shared_expert_ffn = 2056;  // the shared expert's FC2 K: e4m3 rows of 16 bytes
  expect_invalid([&] { layer::check_layer_config(c); }, "config.shared_expert_ffn");
  c = preset("qwen3-30b-a3b");
  c.precision = PrecisionRecipe::kMXFP8;
  layer::check_layer_config(c);
  expect_invalid([&] { MoeLayer layer(c, {.mode = LayerMode::kUnfused}); }, "options.mode");
}

TEST(LayerFp8Args, WeightRegionIsChecked) {
  const MoeConfig c = fp8(preset("mixtral-8x7b"));
  const int64_t E = c.num_experts, H = c.hidden, F = c.ffn, fc1 = c.fc1_width();
  auto dev = [](uintptr_t at, DType dtype, std::initializer_list<int64_t> shape) {
    return TensorView::contiguous(reinterpret_cast<void*>(at), dtype, shape, Device::kCuda);
  };
  const size_t bytes = layer_memory_plan(c, {}, 1).fp8_weight_bytes;
  MoeLayerWeights w{.w1 = dev(uintptr_t{1} << 33, DType::kBFloat16, {E, fc1, H}),
                    .w2 = dev(uintptr_t{1} << 34, DType::kBFloat16, {E, H, F}),
                    .fp8 = {.data = reinterpret_cast<void*>(uintptr_t{1} << 35), .bytes = bytes}};
  layer::check_fp8_weights(c, w);
  w.fp8.bytes = bytes - 1;
  expect_invalid([&] { layer::check_fp8_weights(c, w); }, "weights.fp8");
  w.fp8 = {.data = reinterpret_cast<void*>((uintptr_t{1} << 35) + 16), .bytes = bytes};
  expect_invalid([&] { layer::check_fp8_weights(c, w); }, "weights.fp8");
  w.fp8.data = reinterpret_cast<void*>(uintptr_t{1} << 35);
  w.w2 = dev(uintptr_t{1} << 34, DType::kBFloat16, {E, H, F + 16});
  expect_invalid([&] { layer::check_fp8_weights(c, w); }, "weights.w2");
  w.w2 = dev(uintptr_t{1} << 34, DType::kBFloat16, {E, H, F});
  w.fp8.data = static_cast<char*>(w.w2.data) + 256;  // the FP8 copy over its bf16 source
  expect_invalid([&] { layer::check_fp8_weights(c, w); }, "weights.fp8");
  w.fp8.data = reinterpret_cast<void*>(uintptr_t{1} << 35);
  w.w1 = dev(uintptr_t{1} << 33, DType::kFloat32, {E, fc1, H});
  expect_invalid([&] { layer::check_fp8_weights(c, w); }, "weights.w1");
  MoeConfig bf = c;
  bf.precision = PrecisionRecipe::kBF16;
  expect_invalid([&] { layer::check_fp8_weights(bf, w); }, "config.precision");

  // With a shared expert its weights are quantised too: present, of its shape, not under the
  // region.
  MoeConfig s = c;
  s.shared_expert_ffn = 2048;
  const size_t s_bytes = layer_memory_plan(s, {}, 1).fp8_weight_bytes;
  EXPECT_GT(s_bytes, bytes);
  w.w1 = dev(uintptr_t{1} << 33, DType::kBFloat16, {E, fc1, H});
  w.fp8 = {.data = reinterpret_cast<void*>(uintptr_t{1} << 36), .bytes = s_bytes};
  expect_invalid([&] { layer::check_fp8_weights(s, w); }, "weights.shared_w1");
  w.shared_w1 = dev(uintptr_t{1} << 37, DType::kBFloat16, {2 * 2048, H});
  w.shared_w2 = dev(uintptr_t{1} << 38, DType::kBFloat16, {H, 2048 + 16});
  expect_invalid([&] { layer::check_fp8_weights(s, w); }, "weights.shared_w2");
  w.shared_w2 = dev(uintptr_t{1} << 38, DType::kBFloat16, {H, 2048});
  layer::check_fp8_weights(s, w);
  w.fp8.data = static_cast<char*>(w.shared_w2.data) + 256;
  expect_invalid([&] { layer::check_fp8_weights(s, w); }, "weights.fp8");
}

TEST(LayerFp8CApi, WeightBytesAndBadArguments) {
  moefuse_config_t c{};
  ASSERT_EQ(moefuse_config_preset("deepseek-v3", &c), MOEFUSE_STATUS_OK);
  size_t bytes = 1;
  ASSERT_EQ(moefuse_layer_fp8_weight_bytes(&c, &bytes), MOEFUSE_STATUS_OK);
  EXPECT_EQ(bytes, 0u);
  c.precision = MOEFUSE_PRECISION_FP8_BLOCKWISE;
  ASSERT_EQ(moefuse_layer_fp8_weight_bytes(&c, &bytes), MOEFUSE_STATUS_OK) << moefuse_last_error();
  EXPECT_EQ(bytes, layer_memory_plan(fp8(preset("deepseek-v3")), {}, 1).fp8_weight_bytes);
  EXPECT_EQ(moefuse_layer_fp8_weight_bytes(&c, nullptr), MOEFUSE_STATUS_INVALID_ARGUMENT);
  EXPECT_NE(std::string(moefuse_last_error()).find("'bytes'"), std::string::npos);
  const moefuse_layer_weights_t w{};
  EXPECT_EQ(moefuse_layer_prepare_fp8_weights(nullptr, &w, nullptr),
            MOEFUSE_STATUS_INVALID_ARGUMENT);
  EXPECT_NE(std::string(moefuse_last_error()).find("'layer'"), std::string::npos);
  size_t offset = 0;
  ASSERT_EQ(moefuse_abi_layout("moefuse_layer_weights_t", "fp8_weights_bytes", &offset),
            MOEFUSE_STATUS_OK);
  EXPECT_EQ(offset, offsetof(moefuse_layer_weights_t, fp8_weights_bytes));
}

}  // namespace
}  // namespace moefuse
