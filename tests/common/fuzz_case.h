// The fuzz harness's cases (tools/fuzz, `moefuse-fuzz`), each drawn deterministically from
// (seed, case index): a random MoE layer config, options, a token count and a routing
// distribution, and the layer's data, which routes as that distribution says through the
// layer's own router.
//
// Bounds of a case:
// - H, F (and the shared expert's F) multiples of 64 up to the presets' largest (7168, 14336);
//   E in [1, 512], k in [1, min(16, E)] within what the router reaches (group top-k: topk_groups
//   groups; half-empty routing: the live experts); every activation, both router kinds (groups,
//   score bias, renormalisation, scaling, aux and z losses), expert bias and shared expert
//   sometimes, fused or unfused, recompute_pre sometimes; bf16 precision.
// - T in [0, 65536]. T = 0 is a case of its own: the layer documents T >= 1, so the harness
//   checks that it is refused (InvalidArgument), not run.
// - The CPU reference is fp64 and single-threaded: a case's forward multiply-adds,
//   reference_macs(), are at most kMaxReferenceMacs (the reference's forward + backward runs
//   about 3x that), so T is large only when H, F, E and k are small: a quarter of the cases are
//   drawn that way on purpose (H, F <= 256, T in the upper half of what the budget allows, up to
//   65536). The weights (E·(fc1 + F)·H, plus the shared expert's) are at most kMaxParams
//   elements: drawing them and the reference's per-weight work cost ~50 ns each. Measured on a
//   shared 2-core CI machine: 0.4-1.5 s of reference per 4e8 multiply-adds (up to 2.8 s under
//   load), plus up to ~1.5 s for 2^25 weights: about 3 s for the largest allowed case.
//
// Routing (through the router: x, w_router and score_bias are chosen so that top-k follows it):
// - kUniform: the layer tests' dyadic x and w_router; every expert alike.
// - kZipf, kOneExpert, kHalfEmpty: column 0 of x is 2 for every token and w_router[e, 0] is
//   logit_offset[e] / 2, so expert e's logit is logit_offset[e] plus the rest of the dot product,
//   which the other columns keep near N(0, σ <= 1) (w_router on the grid j/2^p, |j| <= 16, 2^p
//   chosen from H). Every value stays dyadic, so the GPU's fp32 logits equal the reference's.
//   kZipf: offset -s·ln(rank + 1) (ranks a random permutation, s in [0.8, 1.5]): expert
//   popularity about ∝ 1/rank^s. kOneExpert: one hot expert at +8, the rest at -8: every token
//   routes to it (16 logit units ≈ 11σ). kHalfEmpty: half the experts (of each group, with the
//   group router) at -16: no token routes to them. With a score bias, the hot expert's is +1 and
//   the empty ones' -1, so the biased selection agrees.
#pragma once

#include <cstdint>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include "common/layer_step.h"
#include "moefuse/config.h"
#include "moefuse/layer.h"

namespace moefuse::test {

enum class FuzzRouting : uint8_t { kUniform, kZipf, kOneExpert, kHalfEmpty };
inline constexpr int kFuzzRoutingCount = 4;
std::string_view fuzz_routing_name(FuzzRouting r);

inline constexpr int64_t kFuzzMaxHidden = 7168;  // deepseek-v3
inline constexpr int64_t kFuzzMaxFfn = 14336;    // mixtral-8x7b
inline constexpr int64_t kFuzzMaxExperts = 512;
inline constexpr int64_t kFuzzMaxTopK = 16;
inline constexpr int64_t kFuzzMaxTokens = 65536;
inline constexpr double kMaxReferenceMacs = 6e8;
inline constexpr double kMaxParams = 1 << 25;

// The logit offset of a dead (kHalfEmpty) expert.
inline constexpr float kEmptyExpertOffset = -16.0f;

struct FuzzCase {
  uint64_t seed = 0;
  int64_t index = 0;
  MoeConfig config;
  LayerOptions options;
  int64_t tokens = 0;
  FuzzRouting routing = FuzzRouting::kUniform;
  float zipf_exponent = 0;          // kZipf
  std::vector<float> logit_offset;  // [E]; empty with kUniform
};

FuzzCase draw_fuzz_case(uint64_t seed, int64_t index);

// Forward multiply-adds of the reference for (config, T): router logits, FC1, FC2, shared expert.
double reference_macs(const MoeConfig& c, int64_t tokens);
// Weight elements: the experts' w1 and w2, the shared expert's.
double param_count(const MoeConfig& c);

// "moefuse-fuzz --seed S --case N": the command that runs this case again.
std::string repro_command(const FuzzCase& fc);
// Shapes, kinds and routing in one line.
std::string describe(const FuzzCase& fc);

// The case's router inputs (x, w_router, score_bias; the rest empty), cheap to draw alone; and
// all of its data. The router inputs are the same in both.
LayerData fuzz_router_inputs(const FuzzCase& fc);
LayerData fuzz_layer_data(const FuzzCase& fc);

}  // namespace moefuse::test
