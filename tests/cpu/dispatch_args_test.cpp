// Bad-input paths of the GPU router and dispatch ops. Validation runs before any CUDA call, so
// these run on the CPU: views point at a fake (never dereferenced) device address.
#include <gtest/gtest.h>

#include <string>

#include "common/test_util.h"
#include "cuda/quant/fp8_records.h"
#include "cuda/router/router_gemm.h"
#include "formats/fp8_row_record.h"
#include "moefuse/dispatch.h"
#include "moefuse/error.h"
#include "moefuse/router.h"

namespace moefuse {
namespace {

void* const kFake = reinterpret_cast<void*>(uintptr_t{1} << 20);

TensorView dev(DType dtype, std::initializer_list<int64_t> shape, void* data = kFake) {
  return TensorView::contiguous(data, dtype, shape, Device::kCuda);
}

using test::expect_invalid;

constexpr int64_t T = 6, E = 8, K = 2, H = 16;

struct RouterSetup {
  RouterOptions options{};
  TensorView logits = dev(DType::kFloat32, {T, E});
  TensorView bias{};
  RouterOutputs out{
      .expert_idx = dev(DType::kInt32, {T, K}),
      .probs = dev(DType::kFloat32, {T, K}),
      .counts = dev(DType::kInt32, {E}),
      .aux_f = dev(DType::kFloat32, {E}),
      .aux_P = dev(DType::kFloat32, {E}),
      .losses = dev(DType::kFloat32, {2}),
  };
  TensorView health = dev(DType::kInt32, {1});
  Workspace ws{.data = kFake, .bytes = router_topk_workspace_size(T, E)};
  int64_t k = K;

  void run() const { router_topk(options, k, logits, bias, out, health, ws, nullptr); }
};

TEST(RouterTopkArgs, RejectsBadTensorsAndOptions) {
  auto with = [](auto edit) {
    RouterSetup s;
    edit(s);
    return [s] { s.run(); };
  };
  expect_invalid(with([](RouterSetup& s) { s.logits.device = Device::kCpu; }), "logits");
  expect_invalid(with([](RouterSetup& s) { s.logits.dtype = DType::kBFloat16; }), "logits");
  expect_invalid(with([](RouterSetup& s) { s.k = 0; }), "top_k");
  expect_invalid(with([](RouterSetup& s) { s.k = 17; }), "top_k");
  expect_invalid(with([](RouterSetup& s) { s.k = E + 1; }), "config.top_k");
  expect_invalid(with([](RouterSetup& s) { s.logits = dev(DType::kFloat32, {T, 513}); }),
                 "num_experts");
  expect_invalid(with([](RouterSetup& s) { s.out.expert_idx = dev(DType::kInt32, {T, K + 1}); }),
                 "expert_idx");
  expect_invalid(with([](RouterSetup& s) { s.out.probs = dev(DType::kFloat32, {T + 1, K}); }),
                 "probs");
  expect_invalid(with([](RouterSetup& s) { s.out.counts = dev(DType::kFloat32, {E}); }), "counts");
  expect_invalid(with([](RouterSetup& s) { s.out.aux_P = dev(DType::kFloat32, {E - 1}); }),
                 "aux_P");
  expect_invalid(with([](RouterSetup& s) { s.out.losses = dev(DType::kFloat32, {1}); }), "losses");
  expect_invalid(with([](RouterSetup& s) { s.bias = dev(DType::kFloat32, {E}); }), "score_bias");
  expect_invalid(with([](RouterSetup& s) { s.options.use_score_bias = true; }),
                 "config.router.use_score_bias");
  expect_invalid(with([](RouterSetup& s) {
                   s.options.kind = RouterKind::kSigmoidGroupTopK;
                   s.options.use_score_bias = true;
                 }),
                 "score_bias");
  expect_invalid(with([](RouterSetup& s) {
                   s.options.kind = RouterKind::kSigmoidGroupTopK;
                   s.options.num_groups = 3;
                 }),
                 "config.router.num_groups");
  expect_invalid(with([](RouterSetup& s) {
                   s.logits = dev(DType::kFloat32, {T, 256});
                   s.out.counts = dev(DType::kInt32, {256});
                   s.options.kind = RouterKind::kSigmoidGroupTopK;
                   s.options.num_groups = 64;
                   s.options.topk_groups = 2;
                 }),
                 "config.router.num_groups");
  expect_invalid(with([](RouterSetup& s) { s.health = dev(DType::kInt32, {2}); }), "health");
  expect_invalid(with([](RouterSetup& s) { s.ws.bytes = 16; }), "workspace");
  expect_invalid(with([](RouterSetup& s) { s.ws.data = static_cast<char*>(kFake) + 4; }),
                 "workspace");
}

TEST(RouterTopkArgs, RejectsBadBackwardTensors) {
  const RouterOptions o{};
  const auto logits = dev(DType::kFloat32, {T, E}), idx = dev(DType::kInt32, {T, K}),
             counts = dev(DType::kInt32, {E}), dp = dev(DType::kFloat32, {T, K}),
             dl = dev(DType::kFloat32, {T, E});
  const TensorView none{};
  // The call with one argument replaced; the rest valid.
  auto call = [&](TensorView counts_, TensorView dp_, TensorView loss_grads, TensorView dl_) {
    return [=] {
      router_topk_backward(o, K, logits, idx, counts_, dp_, loss_grads, dl_, nullptr);
    };
  };
  expect_invalid(call(counts, dev(DType::kFloat32, {T, 1}), none, dl), "d_probs");
  expect_invalid(call(counts, dp, none, dev(DType::kFloat32, {T, E + 1})), "d_logits");
  expect_invalid(call(dev(DType::kInt32, {E, 1}), dp, none, dl), "counts");
  expect_invalid(call(counts, dp, dev(DType::kFloat32, {3}), dl), "loss_grads");
  expect_invalid(call(counts, dp, dev(DType::kBFloat16, {2}), dl), "loss_grads");
  // The upstream gradient inside d_logits, which the kernel writes while others read it.
  expect_invalid(
      call(counts, dp, TensorView::contiguous(dl.data, DType::kFloat32, {2}, Device::kCuda), dl),
      "d_logits");
}

TEST(RouterLogitsArgs, RejectsBadGemmArguments) {
  const auto x = dev(DType::kBFloat16, {T, H}), w = dev(DType::kBFloat16, {E, H}),
             logits = dev(DType::kFloat32, {T, E});
  const Workspace ws{.data = kFake, .bytes = router_logits_workspace_size()};
  auto* fake_handle = reinterpret_cast<cublasHandle_t>(kFake);
  expect_invalid([&] { router_logits(nullptr, x, w, logits, ws, nullptr); }, "cublas");
  expect_invalid([&] { router_logits(fake_handle, dev(DType::kFloat32, {T, H}), w, logits, ws, nullptr); },
                 "x");
  expect_invalid([&] { router_logits(fake_handle, x, dev(DType::kBFloat16, {E, H + 8}), logits, ws, nullptr); },
                 "x");
  expect_invalid([&] { router_logits(fake_handle, x, w, dev(DType::kBFloat16, {T, E}), ws, nullptr); },
                 "logits");
  expect_invalid([&] { router_logits(fake_handle, x, w, logits, Workspace{}, nullptr); }, "workspace");
  const Workspace bws{.data = kFake, .bytes = router_logits_backward_workspace_size(T, E)};
  const auto dx = dev(DType::kBFloat16, {T, H}), dw = dev(DType::kFloat32, {E, H});
  expect_invalid([&] { router_logits_backward(fake_handle, x, w, logits, dev(DType::kFloat32, {T, H}), dw, bws, nullptr); },
                 "dx");
  expect_invalid([&] { router_logits_backward(fake_handle, x, w, logits, dx, dev(DType::kFloat32, {E, 1}), bws, nullptr); },
                 "d_w_router");
  expect_invalid([&] { router_logits_backward(fake_handle, x, w, dev(DType::kFloat32, {T, 1}), dx, dw, bws, nullptr); },
                 "d_logits");
  expect_invalid([&] { router_logits_backward(fake_handle, x, w, logits, dx, dw, ws, nullptr); },
                 "workspace");
  // An empty dx (dWr only: the layer adds the router's dx in permute_backward_router) leaves
  // every other check in place.
  expect_invalid([&] { router_logits_backward(fake_handle, x, w, logits, TensorView{}, dev(DType::kFloat32, {E, 1}), bws, nullptr); },
                 "d_w_router");
  expect_invalid([&] { router_logits_backward(fake_handle, x, w, logits, TensorView{}, dw, ws, nullptr); },
                 "workspace");
  // The bench's explicit dWr split: its partials must fit the workspace's room for them.
  const cuda::RouterGemmBackward gemms{.cublas = fake_handle, .gemm_workspace = kFake,
                                       .tokens = 1 << 20, .hidden = 2048, .experts = 128};
  const int64_t fit = static_cast<int64_t>(cuda::router_dw_partial_bytes() / (4 * 2048 * 128));
  const cuda::DwSplit split = cuda::dw_split_into(1 << 20, fit + 1);
  ASSERT_EQ(split.parts, fit + 1);
  expect_invalid([&] { cuda::router_dw_gemm(gemms, split, nullptr); }, "split.parts");
  expect_invalid([] { router_topk_workspace_size(-1, E); }, "tokens");
  expect_invalid([] { router_logits_backward_workspace_size(T, 0); }, "num_experts");
}

TEST(DispatchArgs, RejectsBadOffsetsAndMaps) {
  const auto counts = dev(DType::kInt32, {E}), offsets = dev(DType::kInt32, {E + 1});
  expect_invalid([&] { expert_offsets(counts, offsets, 0, nullptr); }, "align");
  expect_invalid([&] { expert_offsets(counts, dev(DType::kInt32, {E}), 1, nullptr); }, "offsets");
  expect_invalid([&] { expert_offsets(dev(DType::kInt32, {2000}), offsets, 1, nullptr); },
                 "counts.shape[0]");

  const auto idx = dev(DType::kInt32, {T, K});
  const DispatchMaps maps{.offsets = offsets,
                          .row_of = dev(DType::kInt32, {T, K}),
                          .token_of_row = dev(DType::kInt32, {T * K})};
  const Workspace ws{.data = kFake, .bytes = dispatch_maps_workspace_size(T, E)};
  const TensorView no_health{};
  expect_invalid([&] { dispatch_maps(idx, 0, 1, maps, no_health, ws, nullptr); }, "num_experts");
  expect_invalid([&] { dispatch_maps(idx, E, 0, maps, no_health, ws, nullptr); }, "align");
  expect_invalid([&] { dispatch_maps(dev(DType::kInt32, {T, 17}), E, 1, maps, no_health, ws, nullptr); },
                 "expert_idx.shape[1]");
  expect_invalid([&] { dispatch_maps(dev(DType::kFloat32, {T, K}), E, 1, maps, no_health, ws, nullptr); },
                 "expert_idx");
  auto small = maps;
  small.token_of_row = dev(DType::kInt32, {T * K - 1});
  expect_invalid([&] { dispatch_maps(idx, E, 1, small, no_health, ws, nullptr); }, "token_of_row");
  auto bad_row_of = maps;
  bad_row_of.row_of = dev(DType::kInt32, {T, K + 1});
  expect_invalid([&] { dispatch_maps(idx, E, 1, bad_row_of, no_health, ws, nullptr); }, "row_of");
  expect_invalid([&] { dispatch_maps(idx, E + 1, 1, maps, no_health, ws, nullptr); }, "offsets");
  expect_invalid([&] { dispatch_maps(idx, E, 1, maps, dev(DType::kFloat32, {1}), ws, nullptr); },
                 "health");
  expect_invalid([&] { dispatch_maps(idx, E, 1, maps, no_health, Workspace{}, nullptr); },
                 "workspace");
}

TEST(DispatchArgs, RejectsBadRowTensors) {
  constexpr int64_t R = T * K;
  const auto x = dev(DType::kBFloat16, {T, H}), xs = dev(DType::kBFloat16, {R, H}),
             row_of = dev(DType::kInt32, {T, K}), tor = dev(DType::kInt32, {R}),
             probs = dev(DType::kFloat32, {T, K});
  const TensorView none{};
  expect_invalid([&] { permute(dev(DType::kBFloat16, {T, 12}), row_of, tor, xs, none, nullptr); },
                 "x");
  expect_invalid([&] { permute(dev(DType::kBFloat16, {T, H}, static_cast<char*>(kFake) + 8), row_of, tor, xs, none, nullptr); },
                 "x");
  expect_invalid([&] { permute(x, row_of, tor, dev(DType::kBFloat16, {R + 1, H}), none, nullptr); },
                 "xs");
  expect_invalid([&] { permute(x, dev(DType::kInt32, {T + 1, K}), tor, xs, none, nullptr); },
                 "row_of");
  expect_invalid([&] { permute(x, row_of, dev(DType::kInt64, {R}), xs, none, nullptr); },
                 "token_of_row");
  expect_invalid([&] { permute_backward(xs, row_of, dev(DType::kBFloat16, {T, 2 * H}), none, nullptr); },
                 "dx");
  expect_invalid([&] { combine(xs, dev(DType::kFloat32, {T, K + 1}), row_of, x, none, nullptr); },
                 "probs");
  expect_invalid([&] { combine(xs, probs, row_of, dev(DType::kFloat32, {T, H}), none, nullptr); },
                 "y");
  expect_invalid([&] { combine(xs, probs, dev(DType::kInt32, {T, 0}), x, none, nullptr); },
                 "row_of.shape[1]");
  // The added term of combine_add and permute_backward_add: bf16 [T, H], the output itself or
  // apart from it (here a part of it: 16 bytes on).
  const auto wide = dev(DType::kBFloat16, {T, H + 8}), f32 = dev(DType::kFloat32, {T, H}),
             shifted = dev(DType::kBFloat16, {T, H}, static_cast<char*>(kFake) + 16);
  expect_invalid([&] { combine_add(xs, probs, row_of, wide, x, none, nullptr); }, "add");
  expect_invalid([&] { combine_add(xs, probs, row_of, f32, x, none, nullptr); }, "add");
  expect_invalid([&] { combine_add(xs, probs, row_of, shifted, x, none, nullptr); }, "add");
  expect_invalid([&] { permute_backward_add(xs, row_of, shifted, x, none, nullptr); }, "add");
  expect_invalid([&] { permute_backward_add(xs, row_of, wide, x, none, nullptr); }, "add");
  // permute_backward_router's router term: d_logits fp32 [T, E] with 1 <= E <= 512, w_router
  // bf16 [E, H] and 16-byte aligned, and the added term as above.
  const auto dl = dev(DType::kFloat32, {T, E}), wr = dev(DType::kBFloat16, {E, H});
  auto router = [&](const TensorView& add, const TensorView& d_logits, const TensorView& w) {
    return [=] { permute_backward_router(xs, row_of, add, d_logits, w, x, none, nullptr); };
  };
  expect_invalid(router(wide, dl, wr), "add");
  expect_invalid(router(none, dev(DType::kBFloat16, {T, E}), wr), "d_logits");
  expect_invalid(router(none, dev(DType::kFloat32, {T + 1, E}), wr), "d_logits");
  expect_invalid(router(none, dev(DType::kFloat32, {T, 0}), dev(DType::kBFloat16, {0, H})),
                 "d_logits.shape[1]");
  expect_invalid(router(none, dev(DType::kFloat32, {T, 513}), dev(DType::kBFloat16, {513, H})),
                 "d_logits.shape[1]");
  expect_invalid(router(none, dl, dev(DType::kBFloat16, {E + 1, H})), "w_router");
  expect_invalid(router(none, dl, dev(DType::kBFloat16, {E, H + 8})), "w_router");
  expect_invalid(router(none, dl, dev(DType::kFloat32, {E, H})), "w_router");
  expect_invalid(router(none, dl, dev(DType::kBFloat16, {E, H}, static_cast<char*>(kFake) + 2)),
                 "w_router");
  const auto dp = dev(DType::kFloat32, {T, K});
  expect_invalid([&] { combine_backward(x, xs, none, row_of, tor, xs, dp, none, nullptr); },
                 "d_probs");
  expect_invalid([&] { combine_backward(x, xs, probs, row_of, tor, xs, none, none, nullptr); },
                 "d_probs");
  expect_invalid([&] { combine_backward(x, xs, probs, row_of, tor, dev(DType::kBFloat16, {R, H + 8}), dp, none, nullptr); },
                 "dys");
  expect_invalid([&] { combine_backward(x, none, probs, row_of, tor, xs, dp, none, nullptr); },
                 "ys");
  expect_invalid([&] { combine_backward(x, xs, probs, row_of, tor, xs, dp, dev(DType::kInt32, {1, 1}), nullptr); },
                 "health");
}

TEST(DispatchArgs, RejectsBadPermuteQuantizeFp8Tensors) {
  constexpr int64_t R = T * K + 1, H32 = 2 * H;  // R = 13: the scale pitch rounds up to 16
  const auto x = dev(DType::kBFloat16, {T, H32}), row_of = dev(DType::kInt32, {T, K}),
             tor = dev(DType::kInt32, {R}), q = dev(DType::kFloat8E4M3, {R, H32}),
             scales = dev(DType::kFloat32, {1, 16}), health = dev(DType::kInt32, {1});
  char* const fake = static_cast<char*>(kFake);
  auto run = [&](const TensorView& x_, const TensorView& row_of_, const TensorView& tor_,
                 const TensorView& q_, const TensorView& scales_, const TensorView& health_) {
    return [=] { permute_quantize_fp8(x_, row_of_, tor_, q_, scales_, health_, nullptr); };
  };
  expect_invalid(run(dev(DType::kFloat32, {T, H32}), row_of, tor, q, scales, health), "x");
  expect_invalid(run(dev(DType::kBFloat16, {T, 24}), row_of, tor, dev(DType::kFloat8E4M3, {R, 24}), scales, health),
                 "x");  // a multiple of 8, not of 16
  expect_invalid(run(dev(DType::kBFloat16, {T, H32}, fake + 8), row_of, tor, q, scales, health), "x");
  expect_invalid(run(x, dev(DType::kInt32, {T + 1, K}), tor, q, scales, health), "row_of");
  expect_invalid(run(x, dev(DType::kInt32, {T, 17}), tor, q, scales, health), "row_of.shape[1]");
  expect_invalid(run(x, row_of, dev(DType::kInt64, {R}), q, scales, health), "token_of_row");
  expect_invalid(run(x, row_of, tor, dev(DType::kBFloat16, {R, H32}), scales, health), "xs_fp8");
  expect_invalid(run(x, row_of, tor, dev(DType::kFloat8E4M3, {R - 1, H32}), scales, health), "xs_fp8");
  expect_invalid(run(x, row_of, tor, dev(DType::kFloat8E4M3, {R, H32}, fake + 8), scales, health), "xs_fp8");
  expect_invalid(run(x, row_of, tor, q, dev(DType::kFloat32, {R, 1}), health), "xs_scales");  // row-major
  expect_invalid(run(x, row_of, tor, q, dev(DType::kFloat32, {1, R}), health), "xs_scales");  // no pitch
  expect_invalid(run(x, row_of, tor, q, dev(DType::kBFloat16, {1, 16}), health), "xs_scales");
  expect_invalid(run(x, row_of, tor, q, dev(DType::kFloat32, {1, 16}, fake + 4), health), "xs_scales");
  expect_invalid(run(x, row_of, tor, q, scales, dev(DType::kFloat32, {1})), "health");
  // Two stages of one x row and its codes must fit in shared memory.
  constexpr int64_t kHuge = 40960;
  expect_invalid(run(dev(DType::kBFloat16, {T, kHuge}), row_of, tor, dev(DType::kFloat8E4M3, {R, kHuge}),
                     dev(DType::kFloat32, {kHuge / 128, 16}), health),
                 "x.shape[1]");
}

TEST(DispatchArgs, RejectsBadPermuteQuantizeFp8RecordsTensors) {
  constexpr int64_t R = T * K + 1, H32 = 2 * H, kBytes = formats::fp8_record_bytes(H32);
  const auto x = dev(DType::kBFloat16, {T, H32}), row_of = dev(DType::kInt32, {T, K}),
             tor = dev(DType::kInt32, {R}), rec = dev(DType::kUInt8, {R, kBytes}),
             health = dev(DType::kInt32, {1});
  char* const fake = static_cast<char*>(kFake);
  auto run = [&](const TensorView& x_, const TensorView& tor_, const TensorView& rec_,
                 const TensorView& health_) {
    return [=] { permute_quantize_fp8_records(x_, row_of, tor_, rec_, health_, nullptr); };
  };
  expect_invalid(run(dev(DType::kBFloat16, {T, 24}), tor, dev(DType::kUInt8, {R, 48}), health),
                 "x");  // a multiple of 8, not of 16
  expect_invalid(run(x, dev(DType::kInt64, {R}), rec, health), "token_of_row");
  expect_invalid(run(x, tor, dev(DType::kFloat8E4M3, {R, kBytes}), health), "records");
  expect_invalid(run(x, tor, dev(DType::kUInt8, {R, 2 * H32}), health), "records");  // bf16 rows
  expect_invalid(run(x, tor, dev(DType::kUInt8, {R - 1, kBytes}), health), "records");
  expect_invalid(run(x, tor, dev(DType::kUInt8, {R, kBytes}, fake + 8), health), "records");
  expect_invalid(run(x, tor, rec, dev(DType::kFloat32, {1})), "health");
}

// The EP receiver's decoder (cuda/quant/fp8_records.h): records [C, bytes] -> x [C, H] bf16 for
// the rows between row_offsets[first] and row_offsets[end].
TEST(DispatchArgs, RejectsBadUnpackFp8RecordsViews) {
  constexpr int64_t C = 40, H32 = 2 * H, kBytes = formats::fp8_record_bytes(H32);
  const auto x = dev(DType::kBFloat16, {C, H32}), rec = dev(DType::kUInt8, {C, kBytes}),
             offsets = dev(DType::kInt32, {E + 1});
  char* const fake = static_cast<char*>(kFake);
  auto run = [](const TensorView& rec_, const TensorView& offsets_, int first, int end,
                const TensorView& x_) {
    return [=] { cuda::unpack_fp8_records(rec_, offsets_, first, end, x_, nullptr); };
  };
  expect_invalid(run(rec, offsets, 0, E, dev(DType::kFloat32, {C, H32})), "x");
  expect_invalid(run(dev(DType::kUInt8, {C, 48}), offsets, 0, E, dev(DType::kBFloat16, {C, 24})),
                 "x");  // a multiple of 8, not of 16
  expect_invalid(run(dev(DType::kBFloat16, {C, kBytes / 2}), offsets, 0, E, x), "records");
  expect_invalid(run(dev(DType::kUInt8, {C - 1, kBytes}), offsets, 0, E, x), "records");
  expect_invalid(run(dev(DType::kUInt8, {C, 2 * H32}), offsets, 0, E, x), "records");  // bf16 rows
  expect_invalid(run(dev(DType::kUInt8, {C, kBytes}, fake + 8), offsets, 0, E, x), "records");
  expect_invalid(run(rec, offsets, 0, E, dev(DType::kBFloat16, {C, H32}, fake + 8)), "x");
  expect_invalid(run(rec, offsets, 3, 2, x), "first");
  expect_invalid(run(rec, offsets, -1, 2, x), "first");
  expect_invalid(run(rec, dev(DType::kInt64, {E + 1}), 0, E, x), "row_offsets");
  expect_invalid(run(rec, dev(DType::kInt32, {E}), 0, E, x), "row_offsets");
}

}  // namespace
}  // namespace moefuse
