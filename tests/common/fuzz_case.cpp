#include "common/fuzz_case.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <sstream>

namespace moefuse::test {
namespace {

// One engine per (seed, case, purpose): the config, the router's inputs and the experts' data
// are independent streams, so the router inputs can be drawn alone.
enum class Stream : uint32_t { kConfig, kRouter, kExperts };

std::mt19937_64 engine(uint64_t seed, int64_t index, Stream s) {
  const auto i = static_cast<uint64_t>(index);
  std::seed_seq seq{static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32),
                    static_cast<uint32_t>(i), static_cast<uint32_t>(i >> 32),
                    static_cast<uint32_t>(s)};
  return std::mt19937_64(seq);
}

int64_t uniform_int(std::mt19937_64& g, int64_t lo, int64_t hi) {
  return std::uniform_int_distribution<int64_t>(lo, hi)(g);
}

bool chance(std::mt19937_64& g, double p) { return std::bernoulli_distribution(p)(g); }

// Log-uniform in [lo, hi]: small and large values alike often.
int64_t log_uniform_int(std::mt19937_64& g, int64_t lo, int64_t hi) {
  const double v = std::exp(std::uniform_real_distribution<double>(
      std::log(double(lo)), std::log(double(hi) + 1.0))(g));
  return std::clamp<int64_t>(static_cast<int64_t>(v), lo, hi);
}

template <class T>
T pick(std::mt19937_64& g, std::initializer_list<T> options) {
  return *(options.begin() + uniform_int(g, 0, static_cast<int64_t>(options.size()) - 1));
}

// The sigmoid router: a group count dividing E with at least two experts per group (or one
// group), at most the GPU router's 32.
void draw_groups(std::mt19937_64& g, MoeConfig& c) {
  std::vector<int> counts;
  for (int d = 1; d <= 32 && d <= c.num_experts; ++d)
    if (c.num_experts % d == 0 && (d == 1 || c.num_experts / d >= 2)) counts.push_back(d);
  c.router.num_groups = counts[uniform_int(g, 0, int64_t(counts.size()) - 1)];
  c.router.topk_groups = static_cast<int>(uniform_int(g, 1, c.router.num_groups));
}

// The most experts a token can route to: all of them, or those of the topk_groups best groups;
// with kHalfEmpty only the live ones (ceil(g/2) of each group of g).
int64_t reachable_experts(const MoeConfig& c, FuzzRouting routing) {
  const bool grouped = c.router.kind == RouterKind::kSigmoidGroupTopK;
  const int64_t groups = grouped ? c.router.num_groups : 1;
  const int64_t per_group = c.num_experts / groups;
  const int64_t live = routing == FuzzRouting::kHalfEmpty ? (per_group + 1) / 2 : per_group;
  return (grouped ? c.router.topk_groups : 1) * live;
}

float eighths(double v) { return static_cast<float>(std::round(v * 8) / 8); }

std::vector<float> draw_offsets(std::mt19937_64& g, const MoeConfig& c, FuzzRouting routing,
                                float* zipf_exponent) {
  const int64_t E = c.num_experts;
  std::vector<float> off(E, 0.0f);
  switch (routing) {
    case FuzzRouting::kUniform: return {};
    case FuzzRouting::kZipf: {
      *zipf_exponent = eighths(std::uniform_real_distribution<double>(0.8, 1.5)(g));
      std::vector<int64_t> rank(E);
      std::iota(rank.begin(), rank.end(), 0);
      std::shuffle(rank.begin(), rank.end(), g);
      for (int64_t e = 0; e < E; ++e) off[e] = eighths(-*zipf_exponent * std::log(rank[e] + 1.0));
      return off;
    }
    case FuzzRouting::kOneExpert: {
      std::fill(off.begin(), off.end(), -8.0f);
      off[uniform_int(g, 0, E - 1)] = 8.0f;
      return off;
    }
    case FuzzRouting::kHalfEmpty: {
      // floor(g/2) random experts of each group of g (one group of E with the softmax router).
      const int64_t groups =
          c.router.kind == RouterKind::kSigmoidGroupTopK ? c.router.num_groups : 1;
      const int64_t per_group = E / groups;
      std::vector<int64_t> members(per_group);
      for (int64_t grp = 0; grp < groups; ++grp) {
        std::iota(members.begin(), members.end(), grp * per_group);
        std::shuffle(members.begin(), members.end(), g);
        for (int64_t i = 0; i < per_group / 2; ++i) off[members[i]] = kEmptyExpertOffset;
      }
      return off;
    }
  }
  return {};
}

// One attempt at a case; false when it breaks a budget (the caller draws again).
bool draw_once(std::mt19937_64& g, FuzzCase& fc) {
  MoeConfig& c = fc.config;
  c = MoeConfig{};
  const bool many_tokens = chance(g, 0.25);  // small H, F, so that T can be large
  c.hidden = 64 * (many_tokens ? uniform_int(g, 1, 4) : log_uniform_int(g, 1, kFuzzMaxHidden / 64));
  c.ffn = 64 * (many_tokens ? uniform_int(g, 1, 4) : log_uniform_int(g, 1, kFuzzMaxFfn / 64));
  c.num_experts = log_uniform_int(g, 1, kFuzzMaxExperts);
  c.activation = pick(g, {Activation::kSwiGLU, Activation::kGeGLU, Activation::kReGLU,
                          Activation::kSquaredReLU, Activation::kClampedSwiGLU});
  if (c.num_experts >= 2 && chance(g, 0.4)) {
    c.router.kind = RouterKind::kSigmoidGroupTopK;
    draw_groups(g, c);
    c.router.use_score_bias = chance(g, 0.5);
  }
  c.router.renormalize = chance(g, 0.7);
  c.router.routed_scaling_factor = pick(g, {1.0f, 2.5f});
  c.router.aux_loss_coeff = pick(g, {0.0f, 0.01f});
  c.router.z_loss_coeff = pick(g, {0.0f, 0.001f});
  fc.routing = static_cast<FuzzRouting>(uniform_int(g, 0, kFuzzRoutingCount - 1));
  const int64_t max_k =
      std::min({kFuzzMaxTopK, c.num_experts, reachable_experts(c, fc.routing)});
  c.top_k = uniform_int(g, 1, max_k);
  c.expert_bias = chance(g, 0.3);
  if (chance(g, 0.25))
    c.shared_expert_ffn =
        64 * (many_tokens ? uniform_int(g, 1, 4) : log_uniform_int(g, 1, kFuzzMaxFfn / 64));
  fc.options = {.mode = chance(g, 0.5) ? LayerMode::kFused : LayerMode::kUnfused,
                .recompute_pre = chance(g, 0.3)};
  if (param_count(c) > kMaxParams) return false;
  const int64_t max_tokens = std::min<int64_t>(
      kFuzzMaxTokens, static_cast<int64_t>(kMaxReferenceMacs / reference_macs(c, 1)));
  if (max_tokens < 1) return false;
  if (chance(g, 0.03)) {
    fc.tokens = 0;
  } else {
    fc.tokens = many_tokens ? uniform_int(g, (max_tokens + 1) / 2, max_tokens)
                            : log_uniform_int(g, 1, max_tokens);
  }
  fc.zipf_exponent = 0;
  fc.logit_offset = draw_offsets(g, c, fc.routing, &fc.zipf_exponent);
  return true;
}

}  // namespace

std::string_view fuzz_routing_name(FuzzRouting r) {
  switch (r) {
    case FuzzRouting::kUniform: return "uniform";
    case FuzzRouting::kZipf: return "zipf";
    case FuzzRouting::kOneExpert: return "one_expert";
    case FuzzRouting::kHalfEmpty: return "half_empty";
  }
  return "unknown";
}

double reference_macs(const MoeConfig& c, int64_t tokens) {
  const MoeConfig s = shared_expert_config(c);
  const double shared = c.shared_expert_ffn > 0 ? double(s.fc1_width() + s.ffn) : 0.0;
  return double(tokens) * double(c.hidden) *
         (double(c.num_experts) + double(c.top_k) * double(c.fc1_width() + c.ffn) + shared);
}

double param_count(const MoeConfig& c) {
  const MoeConfig s = shared_expert_config(c);
  const double shared = c.shared_expert_ffn > 0 ? double(s.fc1_width() + s.ffn) : 0.0;
  return double(c.hidden) * (double(c.num_experts) * double(c.fc1_width() + c.ffn) + shared);
}

FuzzCase draw_fuzz_case(uint64_t seed, int64_t index) {
  std::mt19937_64 g = engine(seed, index, Stream::kConfig);
  FuzzCase fc{.seed = seed, .index = index};
  while (!draw_once(g, fc)) {
  }
  return fc;
}

std::string repro_command(const FuzzCase& fc) {
  return "moefuse-fuzz --seed " + std::to_string(fc.seed) + " --case " + std::to_string(fc.index);
}

std::string describe(const FuzzCase& fc) {
  const MoeConfig& c = fc.config;
  std::ostringstream s;
  s << "H=" << c.hidden << " F=" << c.ffn << " E=" << c.num_experts << " k=" << c.top_k
    << " T=" << fc.tokens << " " << activation_name(c.activation) << " "
    << router_kind_name(c.router.kind);
  if (c.router.kind == RouterKind::kSigmoidGroupTopK)
    s << "(groups " << c.router.topk_groups << "/" << c.router.num_groups
      << (c.router.use_score_bias ? ", score_bias" : "") << ")";
  s << (c.router.renormalize ? " renorm" : "") << " scale=" << c.router.routed_scaling_factor
    << " aux=" << c.router.aux_loss_coeff << " z=" << c.router.z_loss_coeff
    << (c.expert_bias ? " expert_bias" : "");
  if (c.shared_expert_ffn > 0) s << " shared_F=" << c.shared_expert_ffn;
  s << " " << layer_mode_name(fc.options.mode) << (fc.options.recompute_pre ? " recompute" : "")
    << " routing=" << fuzz_routing_name(fc.routing);
  if (fc.routing == FuzzRouting::kZipf) s << "(s=" << fc.zipf_exponent << ")";
  s << " ref_macs=" << reference_macs(c, fc.tokens);
  return s.str();
}

LayerData fuzz_router_inputs(const FuzzCase& fc) {
  std::mt19937_64 g = engine(fc.seed, fc.index, Stream::kRouter);
  const MoeConfig& c = fc.config;
  LayerData d = LayerData::random_router_inputs(c, fc.tokens, g);
  if (fc.routing == FuzzRouting::kUniform) return d;
  const int64_t H = c.hidden, E = c.num_experts;
  // The noise columns: x (std 9.5/8) · w (std 9.5/2^p) summed over H is about
  // 11.3·sqrt(H)/2^p; the smallest 2^p at or above 11.3·sqrt(H) keeps it in (0.5, 1].
  const float scale = std::exp2(std::ceil(std::log2(11.3 * std::sqrt(double(H)))));
  d.w_router = dyadic(g, E * H, scale);
  for (int64_t t = 0; t < fc.tokens; ++t) d.x[t * H] = 2.0f;
  for (int64_t e = 0; e < E; ++e) d.w_router[e * H] = fc.logit_offset[e] / 2;
  if (c.router.use_score_bias) {
    for (int64_t e = 0; e < E; ++e) {
      if (fc.routing == FuzzRouting::kOneExpert && fc.logit_offset[e] > 0) d.score_bias[e] = 1.0f;
      if (fc.routing == FuzzRouting::kHalfEmpty && fc.logit_offset[e] == kEmptyExpertOffset)
        d.score_bias[e] = -1.0f;
    }
  }
  return d;
}

LayerData fuzz_layer_data(const FuzzCase& fc) {
  LayerData d = fuzz_router_inputs(fc);
  std::mt19937_64 g = engine(fc.seed, fc.index, Stream::kExperts);
  d.draw_expert_inputs(g);
  return d;
}

}  // namespace moefuse::test
