// Which drain the FP8 k-grouped wgrad gives a tile (src/cuda/gemm/fp8/wgrad_config.h): TMA tensor
// stores where the experts are short, per-row bulk copies where the math hides the drain. The
// layer's wgrads at T = 16384 with uniform routing, the capacity G = fp8_colwise_groups(R, E) its
// operands are quantised with: only gpt-oss's (512 rows an expert) take the tensor stores, the
// choice run 46 measured (docs/fp8.md "k-grouped wgrad").
#include <gtest/gtest.h>

#include <string>
#include <utility>

#include "cuda/gemm/fp8/wgrad_config.h"
#include "moefuse/config.h"
#include "moefuse/grouped_gemm_fp8_wgrad.h"

namespace moefuse::gemm::fp8_wgrad {
namespace {

TEST(Fp8WgradDrain, OnlyShortExpertsDrainByTensorStores) {
  const int64_t T = 16384;
  for (const auto& [name, want] : {std::pair{"gpt-oss-120b", true},
                                   std::pair{"qwen3-30b-a3b", false},
                                   std::pair{"deepseek-v3", false},
                                   std::pair{"mixtral-8x7b", false}}) {
    const MoeConfig c = preset(name);
    const int64_t groups = fp8_colwise_groups(T * c.top_k, c.num_experts);
    EXPECT_EQ(drains_by_tensor_stores(groups, c.num_experts), want)
        << name << ": " << groups << " groups over " << c.num_experts << " experts";
  }
  // The deepseek slice's shared expert: one expert over all T rows.
  EXPECT_FALSE(drains_by_tensor_stores(fp8_colwise_groups(T, 1), 1));
  // The rule's edge: 6 groups an expert still drain by tensor stores, 7 not.
  EXPECT_TRUE(drains_by_tensor_stores(6 * 10, 10));
  EXPECT_FALSE(drains_by_tensor_stores(6 * 10 + 1, 10));
}

}  // namespace
}  // namespace moefuse::gemm::fp8_wgrad
