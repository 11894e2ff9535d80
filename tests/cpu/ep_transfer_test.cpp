// ref/ep.h's transfers against brute force: after ep_dispatch each rank holds, for each of its
// experts, exactly the rows one GPU gives that expert for all ranks' tokens concatenated in rank
// order; ep_return brings every row back to where it came from; rows past the data are left
// untouched; bad views are named. Then the expert-weight slices of ep_expert_slice.
#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <vector>

#include "ref/dispatch.h"
#include "ref/ep.h"
#include "ref_test_helpers.h"

namespace moefuse::test {
namespace {

constexpr int kExperts = 24;  // a multiple of every R tried
constexpr int kTopK = 3;

// One rank's routing of its tokens (random experts, repeats allowed: dispatch does not mind),
// as one GPU permutes them: offsets [E+1] and the token (global id) of each permuted row.
struct Routed {
  std::vector<int32_t> idx, offsets = std::vector<int32_t>(kExperts + 1), token_of_row;
};

Routed route_randomly(const std::vector<int32_t>& idx) {
  const int64_t T = static_cast<int64_t>(idx.size()) / kTopK;
  Routed r{.idx = idx};
  std::vector<int32_t> counts(kExperts), row_of(idx.size());
  for (int32_t e : idx) ++counts[e];
  const int64_t rows = ref::expert_offsets(i32(counts, {kExperts}), i32(r.offsets, {kExperts + 1}));
  r.token_of_row.resize(rows);
  ref::dispatch_maps(i32(r.idx, {T, kTopK}), i32(r.offsets, {kExperts + 1}),
                     i32(row_of, {T, kTopK}), i32(r.token_of_row, {rows}));
  return r;
}

// Rows of H elements of `Bits` (the dtype's storage) whose element h is token·8 + h: the
// payload says which token's row it is and that the whole row moved.
template <class Bits>
void dispatch_matches_one_gpu(DType dtype, int ranks, int64_t H) {
  SCOPED_TRACE(testing::Message() << "R " << ranks << " dtype " << dtype_name(dtype));
  const Bits kPoison = static_cast<Bits>(0x7fc1);
  std::uniform_int_distribution<int> tokens(0, 9), expert(0, kExperts - 1);
  std::vector<Routed> rank(ranks);
  std::vector<int32_t> all_idx, gathered, first_token(ranks + 1);
  for (int s = 0; s < ranks; ++s) {
    const int T = s == ranks - 1 && ranks > 1 ? 0 : tokens(rng());  // the last rank sends nothing
    std::vector<int32_t> idx(T * kTopK);
    for (auto& e : idx) e = expert(rng());
    all_idx.insert(all_idx.end(), idx.begin(), idx.end());
    rank[s] = route_randomly(idx);
    gathered.insert(gathered.end(), rank[s].offsets.begin(), rank[s].offsets.end());
    first_token[s + 1] = first_token[s] + T;
  }
  const Routed one = route_randomly(all_idx);

  // xs[s]: two spare rows past the data, poisoned, that ys[s] must keep.
  std::vector<std::vector<Bits>> xs(ranks), recv(ranks), back(ranks);
  std::vector<std::vector<int32_t>> recv_offsets(ranks, std::vector<int32_t>(kExperts / ranks + 1));
  std::vector<TensorView> xs_v, recv_v, back_v, recv_off_v;
  const int64_t capacity = static_cast<int64_t>(one.token_of_row.size()) + 3;
  for (int s = 0; s < ranks; ++s) {
    const int64_t rows = static_cast<int64_t>(rank[s].token_of_row.size()) + 2;
    xs[s].assign(rows * H, kPoison);
    for (size_t r = 0; r < rank[s].token_of_row.size(); ++r)
      for (int64_t h = 0; h < H; ++h)
        xs[s][r * H + h] = static_cast<Bits>((first_token[s] + rank[s].token_of_row[r]) * 8 + h);
    back[s].assign(rows * H, kPoison);
    recv[s].assign(capacity * H, kPoison);
    xs_v.push_back(TensorView::contiguous(xs[s].data(), dtype, {rows, H}));
    back_v.push_back(TensorView::contiguous(back[s].data(), dtype, {rows, H}));
    recv_v.push_back(TensorView::contiguous(recv[s].data(), dtype, {capacity, H}));
    recv_off_v.push_back(i32(recv_offsets[s], {kExperts / ranks + 1}));
  }
  const TensorView offsets = i32(gathered, {ranks, kExperts + 1});
  ref::ep_dispatch(offsets, xs_v, recv_v, recv_off_v);

  const int el = kExperts / ranks;
  for (int d = 0; d < ranks; ++d) {
    for (int l = 0; l < el; ++l) {
      const int32_t* want = &one.token_of_row[one.offsets[d * el + l]];
      const int64_t n = one.offsets[d * el + l + 1] - one.offsets[d * el + l];
      ASSERT_EQ(recv_offsets[d][l + 1] - recv_offsets[d][l], n) << "rank " << d << " expert " << l;
      for (int64_t i = 0; i < n; ++i)
        for (int64_t h = 0; h < H; ++h)
          ASSERT_EQ(recv[d][(recv_offsets[d][l] + i) * H + h], static_cast<Bits>(want[i] * 8 + h))
              << "rank " << d << " local expert " << l << " row " << i;
    }
    for (int64_t i = recv_offsets[d][el] * H; i < capacity * H; ++i)
      ASSERT_EQ(recv[d][i], kPoison) << "rank " << d << " wrote past the received rows";
  }

  ref::ep_return(offsets, recv_v, back_v);
  for (int s = 0; s < ranks; ++s) EXPECT_EQ(back[s], xs[s]) << "rank " << s;
}

TEST(EpTransfer, DispatchIsTheOneGpuOrderAndReturnInvertsIt) {
  for (int ranks : {1, 2, 3, 4, 8}) {
    dispatch_matches_one_gpu<uint16_t>(DType::kBFloat16, ranks, 3);
    dispatch_matches_one_gpu<uint32_t>(DType::kFloat32, ranks, 2);
  }
}

// Two ranks, E = 4: rank 0 has 3 rows (experts 0, 2, 2), rank 1 has 1 (expert 1).
struct TwoRanks {
  std::vector<int32_t> gathered = {0, 1, 1, 3, 3, 0, 0, 1, 1, 1};
  std::vector<float> x0 = std::vector<float>(3 * 2), x1 = std::vector<float>(1 * 2);
  std::vector<float> r0 = std::vector<float>(2 * 2), r1 = std::vector<float>(2 * 2);
  std::vector<int32_t> o0 = std::vector<int32_t>(3), o1 = std::vector<int32_t>(3);
  std::vector<TensorView> xs = {f32(x0, {3, 2}), f32(x1, {1, 2})};
  std::vector<TensorView> recv = {f32(r0, {2, 2}), f32(r1, {2, 2})};
  std::vector<TensorView> recv_offsets = {i32(o0, {3}), i32(o1, {3})};
  TensorView offsets() {
    return i32(gathered, {2, static_cast<int64_t>(gathered.size()) / 2});
  }
  void dispatch() { ref::ep_dispatch(offsets(), xs, recv, recv_offsets); }
  void back() { ref::ep_return(offsets(), recv, xs); }
};

TEST(EpTransfer, BadViewsAreNamed) {
  EXPECT_NO_THROW({ TwoRanks t; t.dispatch(); t.back(); });
  const auto bad = [](auto edit, const char* name, bool back = false) {
    TwoRanks t;
    edit(t);
    expect_invalid([&] { back ? t.back() : t.dispatch(); }, name);
  };
  bad([](TwoRanks& t) { t.xs.clear(); t.recv.clear(); }, "xs");
  bad([](TwoRanks& t) { t.recv.pop_back(); }, "recv");
  bad([](TwoRanks& t) { t.recv_offsets.pop_back(); }, "recv_offsets");
  bad([](TwoRanks& t) { t.gathered = {0, 1, 1, 3, 0, 0, 1, 1}; }, "offsets");  // E = 3, R = 2
  bad([](TwoRanks& t) { t.gathered[7] = 2, t.gathered[8] = 2, t.gathered[9] = 2; }, "offsets[1]");
  bad([](TwoRanks& t) { t.gathered[3] = 0; }, "offsets[0]");  // decreasing
  bad([](TwoRanks& t) { t.xs[0].dtype = DType::kFloat4E2M1; }, "xs[0]");
  bad([](TwoRanks& t) { t.xs[1].dtype = DType::kBFloat16; }, "xs[1]");
  bad([](TwoRanks& t) { t.xs[1] = f32(t.x1, {1, 1}); }, "xs[1]");
  bad([](TwoRanks& t) { t.recv[1] = f32(t.r1, {1, 2}); }, "recv[1]");
  bad([](TwoRanks& t) { t.recv_offsets[1] = i32(t.o1, {2}); }, "recv_offsets[1]");
  bad([](TwoRanks& t) { t.recv[0] = f32(t.r0, {1, 2}); }, "ys_recv[0]", true);
  bad([](TwoRanks& t) { t.xs[1].device = Device::kCuda; }, "ys[1]", true);
}

// Rank d's slice of [E, ...] weights starts at expert d·El; absent biases stay absent.
TEST(EpTransfer, ExpertSlices) {
  const MoeConfig c{.hidden = 3, .ffn = 2, .num_experts = 8, .top_k = 2,
                    .activation = Activation::kSquaredReLU, .shared_expert_ffn = 4};
  std::vector<float> w1(8 * 2 * 3), w2(8 * 3 * 2), b2(8 * 3);
  const ref::ExpertWeights w{.w1 = f32(w1, {8, 2, 3}), .w2 = f32(w2, {8, 3, 2}),
                             .b2 = f32(b2, {8, 3})};
  const ref::ExpertWeights s = ref::ep_expert_slice(w, 4, 3);
  EXPECT_EQ(s.w1.data, w1.data() + 6 * 2 * 3);
  EXPECT_EQ(shape_string(s.w1), "[2, 2, 3]");
  EXPECT_TRUE(is_absent(s.b1));
  EXPECT_EQ(s.w2.data, w2.data() + 6 * 3 * 2);
  EXPECT_EQ(s.b2.data, b2.data() + 6 * 3);
  EXPECT_EQ(shape_string(s.b2), "[2, 3]");
  const MoeConfig local = ref::ep_expert_config(c, 4);
  EXPECT_EQ(local.num_experts, 2);
  EXPECT_EQ(local.shared_expert_ffn, 0);
  expect_invalid([&] { ref::ep_expert_slice(w, 0, 0); }, "ranks");
  expect_invalid([&] { ref::ep_expert_slice(w, 4, 4); }, "rank");
  expect_invalid([&] { ref::ep_expert_slice(w, 3, 0); }, "weights.w1");
  expect_invalid([&] { ref::ep_expert_config(c, 3); }, "ranks");
}

}  // namespace
}  // namespace moefuse::test
