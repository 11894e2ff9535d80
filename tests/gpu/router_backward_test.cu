// GPU router backward (top-k weights, aux and z-loss to d_logits) and the cuBLAS logits GEMMs
// vs the CPU reference.
#include <cublas_v2.h>
#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

#include "common/test_util.h"
#include "gpu/dispatch_test_util.h"
#include "moefuse/router.h"
#include "ref/router.h"

namespace moefuse {
namespace {

using test::DeviceBuffer;

TEST(RouterBackward, DLogitsMatchReference) {
  MOEFUSE_REQUIRE_HOPPER();
  struct Case {
    RouterKind kind;
    bool renormalize;
    int64_t E, k, T;
    float sure = 0;  // added to one logit of each token: a router sure of one expert
  };
  // The sure cases keep the top expert's small gradient (1 − p ≈ 1e-6), which plain fp32
  // centring loses to cancellation (fuzz run 10: a 2.7% error in d_w_router).
  const Case cases[] = {
      {RouterKind::kSoftmaxTopK, true, 128, 8, 4096},  {RouterKind::kSoftmaxTopK, false, 8, 2, 37},
      {RouterKind::kSoftmaxTopK, true, 512, 16, 300},  {RouterKind::kSoftmaxTopK, true, 1, 1, 5},
      {RouterKind::kSigmoidGroupTopK, true, 32, 4, 4096},
      {RouterKind::kSigmoidGroupTopK, false, 256, 8, 100},
      {RouterKind::kSoftmaxTopK, true, 64, 8, 0},
      {RouterKind::kSoftmaxTopK, false, 17, 13, 64, 16.0f},
      {RouterKind::kSoftmaxTopK, true, 8, 4, 64, 16.0f},
      {RouterKind::kSigmoidGroupTopK, true, 32, 4, 64, 12.0f},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE("E=" + std::to_string(c.E) + " k=" + std::to_string(c.k) + " T=" +
                 std::to_string(c.T) + " sure=" + std::to_string(c.sure) +
                 " seed=" + std::to_string(test::seed()));
    RouterOptions o{.kind = c.kind, .renormalize = c.renormalize, .routed_scaling_factor = 2.5f,
                    .aux_loss_coeff = 0.05f, .z_loss_coeff = 0.01f};
    if (c.kind == RouterKind::kSigmoidGroupTopK && c.E >= 32) o.num_groups = 8, o.topk_groups = 4;
    const int64_t T = c.T, E = c.E, k = c.k;
    std::vector<float> logits = test::random_normal(T * E, 2.0f), probs(T * k);
    for (int64_t t = 0; t < T; ++t) logits[t * E + t % E] += c.sure;
    std::vector<int32_t> idx(T * k), counts(E);
    ref::route(o, k, test::host_view(logits, DType::kFloat32, {T, E}), TensorView{},
               test::host_view(idx, DType::kInt32, {T, k}), test::host_view(probs, DType::kFloat32, {T, k}),
               test::host_view(counts, DType::kInt32, {E}));
    std::vector<float> d_probs = test::random_normal(T * k), want(T * E);
    ref::route_backward(o, k, test::host_view(logits, DType::kFloat32, {T, E}),
                        test::host_view(idx, DType::kInt32, {T, k}),
                        test::host_view(counts, DType::kInt32, {E}),
                        test::host_view(d_probs, DType::kFloat32, {T, k}),
                        test::host_view(want, DType::kFloat32, {T, E}));
    DeviceBuffer<float> g_logits(logits), g_dp(d_probs), g_dl(T * E);
    DeviceBuffer<int32_t> g_idx(idx), g_counts(counts);
    auto run = [&](const TensorView& loss_grads) {
      g_dl.poison();
      router_topk_backward(o, k, g_logits.view(DType::kFloat32, {T, E}),
                           g_idx.view(DType::kInt32, {T, k}), g_counts.view(DType::kInt32, {E}),
                           g_dp.view(DType::kFloat32, {T, k}), loss_grads,
                           g_dl.view(DType::kFloat32, {T, E}), nullptr);
      return g_dl.download();
    };
    const std::vector<float> got = run(TensorView{});
    EXPECT_LE(test::rel_norm_error(got, want), 2e-5);
    EXPECT_TRUE(test::same_bits(run(TensorView{}), got, "d_logits (second run)"));
    // The losses' upstream gradient, read from device memory: {1, 1} is the default bit for bit;
    // {γa, γz} is the reference with the coefficients scaled by them (0: that loss unused).
    DeviceBuffer<float> ones(std::vector<float>{1.0f, 1.0f});
    EXPECT_TRUE(test::same_bits(run(ones.view(DType::kFloat32, {2})), got, "d_logits, γ = 1"));
    for (const auto [ga, gz] : {std::pair{2.5f, 0.0f}, std::pair{0.0f, 3.0f}}) {
      RouterOptions scaled = o;
      scaled.aux_loss_coeff *= ga;
      scaled.z_loss_coeff *= gz;
      std::vector<float> want_scaled(T * E);
      ref::route_backward(scaled, k, test::host_view(logits, DType::kFloat32, {T, E}),
                          test::host_view(idx, DType::kInt32, {T, k}),
                          test::host_view(counts, DType::kInt32, {E}),
                          test::host_view(d_probs, DType::kFloat32, {T, k}),
                          test::host_view(want_scaled, DType::kFloat32, {T, E}));
      DeviceBuffer<float> gamma(std::vector<float>{ga, gz});
      EXPECT_LE(test::rel_norm_error(run(gamma.view(DType::kFloat32, {2})), want_scaled), 2e-5)
          << "γ = {" << ga << ", " << gz << "}";
    }
  }
}

TEST(RouterLogits, ForwardAndBackwardGemmsMatchReference) {
  MOEFUSE_REQUIRE_HOPPER();
  cublasHandle_t cublas = nullptr;
  ASSERT_EQ(cublasCreate(&cublas), CUBLAS_STATUS_SUCCESS);
  // 4133 tokens: dWr split along T (4 parts on an H200, the last one shorter: router_dw_split.h).
  for (auto [T, H, E] : {std::tuple<int64_t, int64_t, int64_t>{37, 2048, 128},
                         {1024, 7168, 32}, {4133, 256, 128}, {1, 64, 7}, {0, 256, 8}}) {
    SCOPED_TRACE("T=" + std::to_string(T) + " H=" + std::to_string(H) + " E=" + std::to_string(E));
    std::vector<float> x = test::bf16_rounded(test::random_normal(T * H)),
                       w = test::bf16_rounded(test::random_normal(E * H, 0.02f)), logits(T * E);
    ref::router_logits(test::host_view(x, DType::kFloat32, {T, H}),
                       test::host_view(w, DType::kFloat32, {E, H}),
                       test::host_view(logits, DType::kFloat32, {T, E}));
    DeviceBuffer<test::Bf16> g_x(test::to_bf16(x)), g_w(test::to_bf16(w));
    DeviceBuffer<float> g_logits(T * E);
    g_logits.poison();
    DeviceBuffer<unsigned char> ws(router_logits_backward_workspace_size(T, E));
    router_logits(cublas, g_x.view(DType::kBFloat16, {T, H}), g_w.view(DType::kBFloat16, {E, H}),
                  g_logits.view(DType::kFloat32, {T, E}),
                  Workspace{.data = ws.data(), .bytes = ws.size()}, nullptr);
    EXPECT_LE(test::rel_norm_error(g_logits.download(), logits), 1e-5);

    // Backward: the reference gets the bf16-rounded d_logits the GPU multiplies with.
    std::vector<float> d_logits = test::random_normal(T * E);
    std::vector<float> d_logits16 = test::bf16_rounded(d_logits);
    std::vector<float> dx = test::bf16_rounded(test::random_normal(T * H)), dw(E * H);
    DeviceBuffer<float> g_dl(d_logits), g_dw(E * H);
    DeviceBuffer<test::Bf16> g_dx(test::to_bf16(dx));
    g_dw.poison();
    ref::router_logits_backward(test::host_view(x, DType::kFloat32, {T, H}),
                                test::host_view(w, DType::kFloat32, {E, H}),
                                test::host_view(d_logits16, DType::kFloat32, {T, E}),
                                test::host_view(dx, DType::kFloat32, {T, H}),
                                test::host_view(dw, DType::kFloat32, {E, H}));
    router_logits_backward(cublas, g_x.view(DType::kBFloat16, {T, H}),
                           g_w.view(DType::kBFloat16, {E, H}), g_dl.view(DType::kFloat32, {T, E}),
                           g_dx.view(DType::kBFloat16, {T, H}), g_dw.view(DType::kFloat32, {E, H}),
                           Workspace{.data = ws.data(), .bytes = ws.size()}, nullptr);
    EXPECT_LE(test::rel_norm_error(test::from_bf16(g_dx.download()), dx), 8e-3);
    EXPECT_LE(test::rel_norm_error(g_dw.download(), dw), 1e-5);
  }
  cublasDestroy(cublas);
}

}  // namespace
}  // namespace moefuse
