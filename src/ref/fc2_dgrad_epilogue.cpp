#include "ref/fc2_dgrad_epilogue.h"

#include <cstdint>
#include <vector>

#include "moefuse/grouped_gemm.h"
#include "ref/bf16_bits.h"
#include "ref/check.h"
#include "ref/expert_mlp.h"

namespace moefuse::ref {

void fc2_dgrad_epilogue(const Fc2DgradArgs& args, const float* g) {
  const int64_t num_experts = args.offsets.size(0) - 1, fc1 = args.d_pre.size(1);
  const bool glu = is_glu(args.activation);
  const int64_t f = glu ? fc1 / 2 : fc1;
  const int64_t h = is_absent(args.b2) ? 0 : args.b2.size(1);
  const MoeConfig config{.hidden = h > 0 ? h : 1, .ffn = f, .num_experts = num_experts,
                         .top_k = 1, .activation = args.activation,
                         .clamped_swiglu = args.clamped_swiglu};
  const int32_t* off = args.offsets.as<const int32_t>();
  const uint16_t* pre_bits = args.pre.as<const uint16_t>();
  std::vector<double> pre(fc1), act(f), d_act(f), d_pre(fc1);
  for (int64_t e = 0; e < num_experts; ++e) {
    for (int64_t r = off[e]; r < off[e + 1]; ++r) {
      // The kernel's interleaved columns to the reference [gate; up] order and back.
      auto col = [&](int64_t i) { return glu ? glu_interleaved_row(i, f) : i; };
      for (int64_t i = 0; i < fc1; ++i) pre[i] = bf16_value(pre_bits[r * fc1 + col(i)]);
      const double p = is_absent(args.row_scale) ? 1.0 : args.row_scale.as<const float>()[r];
      activation_forward(config, pre.data(), act.data());
      double dp = 0;
      for (int64_t i = 0; i < f; ++i) {
        const double gi = g[r * f + i];
        d_act[i] = p * gi;
        dp += gi * act[i];
      }
      activation_backward(config, pre.data(), d_act.data(), d_pre.data());
      for (int64_t i = 0; i < fc1; ++i)
        args.d_pre.as<uint16_t>()[r * fc1 + col(i)] = bf16_bits(d_pre[i]);
      if (!is_absent(args.scaled_act))
        for (int64_t i = 0; i < f; ++i)
          args.scaled_act.as<uint16_t>()[r * f + i] = bf16_bits(p * act[i]);
      if (is_absent(args.d_row_scale)) continue;
      for (int64_t i = 0; i < h; ++i)
        dp += bf16_value(args.dys.as<const uint16_t>()[r * h + i]) *
              double(args.b2.as<const float>()[e * h + i]);
      args.d_row_scale.as<float>()[r] = static_cast<float>(dp);
    }
  }
}

}  // namespace moefuse::ref
