// The whole dispatch path captured once as a CUDA graph (logits GEMM → router → maps → permute
// → combine), then replayed on new inputs written into the same buffers; every replay is
// compared with the reference. Proves the path is sync- and allocation-free.
#include <cublas_v2.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "common/test_util.h"
#include "cuda/check.h"
#include "gpu/dispatch_test_util.h"
#include "moefuse/dispatch.h"
#include "moefuse/health.h"
#include "moefuse/router.h"
#include "ref/dispatch.h"
#include "ref/router.h"

namespace moefuse {
namespace {

using test::Bf16;
using test::DeviceBuffer;

TEST(DispatchGraph, CaptureOnceReplayOnNewInputs) {
  MOEFUSE_REQUIRE_HOPPER();
  const MoeConfig c = preset("deepseek-v3");
  const int64_t T = 512, H = 256, E = c.num_experts, k = c.top_k, R = T * k;
  cublasHandle_t cublas = nullptr;
  ASSERT_EQ(cublasCreate(&cublas), CUBLAS_STATUS_SUCCESS);
  cudaStream_t stream = nullptr;
  MOEFUSE_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));

  // Every buffer's poison and upload go on `stream`, the graph's stream: on the legacy default
  // stream they would not be ordered with it (non-blocking), and a late NaN poison of the
  // logits would reach the router (the health flag's bit 0).
  DeviceBuffer<Bf16> x(T * H, stream), w(E * H, stream), xs(R * H, stream), y(T * H, stream);
  DeviceBuffer<float> logits(T * E, stream), bias(E, stream), probs(T * k, stream), f(E, stream),
      P(E, stream), losses(2, stream);
  DeviceBuffer<int32_t> idx(T * k, stream), counts(E, stream), offsets(E + 1, stream),
      row_of(T * k, stream), tor(R, stream), health(1, stream);
  DeviceBuffer<unsigned char> ws_gemm(router_logits_workspace_size(), stream),
      ws_router(router_topk_workspace_size(T, E), stream),
      ws_maps(dispatch_maps_workspace_size(T, E), stream);
  const TensorView hv = health.view(DType::kInt32, {1});

  auto step = [&](cudaStream_t s) {
    router_logits(cublas, x.view(DType::kBFloat16, {T, H}), w.view(DType::kBFloat16, {E, H}),
                  logits.view(DType::kFloat32, {T, E}),
                  Workspace{.data = ws_gemm.data(), .bytes = ws_gemm.size()}, s);
    router_topk(c.router, k, logits.view(DType::kFloat32, {T, E}), bias.view(DType::kFloat32, {E}),
                RouterOutputs{.expert_idx = idx.view(DType::kInt32, {T, k}),
                              .probs = probs.view(DType::kFloat32, {T, k}),
                              .counts = counts.view(DType::kInt32, {E}),
                              .aux_f = f.view(DType::kFloat32, {E}),
                              .aux_P = P.view(DType::kFloat32, {E}),
                              .losses = losses.view(DType::kFloat32, {2})},
                hv, Workspace{.data = ws_router.data(), .bytes = ws_router.size()}, s);
    dispatch_maps(idx.view(DType::kInt32, {T, k}), E, 1,
                  DispatchMaps{.offsets = offsets.view(DType::kInt32, {E + 1}),
                               .row_of = row_of.view(DType::kInt32, {T, k}),
                               .token_of_row = tor.view(DType::kInt32, {R})},
                  hv, Workspace{.data = ws_maps.data(), .bytes = ws_maps.size()}, s);
    permute(x.view(DType::kBFloat16, {T, H}), row_of.view(DType::kInt32, {T, k}),
            tor.view(DType::kInt32, {R}), xs.view(DType::kBFloat16, {R, H}), hv, s);
    // The experts are the identity here: combine the permuted rows straight back.
    combine(xs.view(DType::kBFloat16, {R, H}), probs.view(DType::kFloat32, {T, k}),
            row_of.view(DType::kInt32, {T, k}), y.view(DType::kBFloat16, {T, H}), hv, s);
  };

  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  MOEFUSE_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  step(stream);
  MOEFUSE_CUDA_CHECK(cudaStreamEndCapture(stream, &graph));
  MOEFUSE_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));

  for (int replay = 0; replay < 3; ++replay) {
    SCOPED_TRACE("replay " + std::to_string(replay) + " seed=" + std::to_string(test::seed()));
    std::vector<float> xh = test::bf16_rounded(test::random_normal(T * H)),
                       wh = test::bf16_rounded(test::random_normal(E * H, 0.1f)),
                       bh = test::random_normal(E, 0.05f);
    x.upload(test::to_bf16(xh)), w.upload(test::to_bf16(wh)), bias.upload(bh);
    for (auto* b : {&logits, &probs}) b->poison();
    for (auto* b : {&idx, &offsets, &row_of, &tor}) b->poison(0x7F);
    xs.poison(), y.poison();
    reset_health_flags(hv, stream);
    MOEFUSE_CUDA_CHECK(cudaGraphLaunch(exec, stream));
    ASSERT_EQ(read_health_flags(hv, stream), 0);

    // The selection is compared on the GPU's own logits (fp32 GEMM rounding would otherwise
    // move near-ties); the logits themselves against the fp64 reference GEMM.
    std::vector<float> lg = logits.download(), lr(T * E);
    ref::router_logits(test::host_view(xh, DType::kFloat32, {T, H}),
                       test::host_view(wh, DType::kFloat32, {E, H}),
                       test::host_view(lr, DType::kFloat32, {T, E}));
    EXPECT_LE(test::rel_norm_error(lg, lr), 1e-5);
    std::vector<int32_t> ri(T * k), rc(E), ro(E + 1), rrow(T * k), rtor(R);
    std::vector<float> rp(T * k), ry(T * H);
    ref::route(c.router, k, test::host_view(lg, DType::kFloat32, {T, E}),
               test::host_view(bh, DType::kFloat32, {E}), test::host_view(ri, DType::kInt32, {T, k}),
               test::host_view(rp, DType::kFloat32, {T, k}), test::host_view(rc, DType::kInt32, {E}));
    ref::expert_offsets(test::host_view(rc, DType::kInt32, {E}), test::host_view(ro, DType::kInt32, {E + 1}));
    ref::dispatch_maps(test::host_view(ri, DType::kInt32, {T, k}), test::host_view(ro, DType::kInt32, {E + 1}),
                       test::host_view(rrow, DType::kInt32, {T, k}), test::host_view(rtor, DType::kInt32, {R}));
    std::vector<float> rxs(R * H);
    ref::permute(test::host_view(xh, DType::kFloat32, {T, H}), test::host_view(rtor, DType::kInt32, {R}),
                 test::host_view(rxs, DType::kFloat32, {R, H}));
    ref::combine(test::host_view(rxs, DType::kFloat32, {R, H}), test::host_view(rp, DType::kFloat32, {T, k}),
                 test::host_view(rrow, DType::kInt32, {T, k}), test::host_view(ry, DType::kFloat32, {T, H}));
    EXPECT_TRUE(test::same_bits(idx.download(), ri, "expert_idx"));
    EXPECT_LE(test::rel_norm_error(probs.download(), rp), 2e-6);
    EXPECT_TRUE(test::same_bits(offsets.download(), ro, "offsets"));
    EXPECT_TRUE(test::same_bits(row_of.download(), rrow, "row_of"));
    EXPECT_TRUE(test::same_bits(tor.download(), rtor, "token_of_row"));
    EXPECT_TRUE(test::same_bits(test::from_bf16(xs.download()), rxs, "xs"));
    EXPECT_LE(test::rel_norm_error(test::from_bf16(y.download()), ry), 8e-3);
  }
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaStreamDestroy(stream);
  cublasDestroy(cublas);
}

}  // namespace
}  // namespace moefuse
