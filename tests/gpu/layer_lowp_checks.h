// Checks the low-precision layer tests (layer_fp8_test.cpp, layer_mxfp8_test.cpp) share: the
// reference layer's inputs, y and every gradient against a reference within a tolerance (the
// worst element named by its indices, NaN counted as unwritten), and the weight region's bytes.
#pragma once

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "cuda/check.h"
#include "cuda/layer/plan.h"
#include "gpu/layer_test_fixture.h"
#include "ref/layer.h"

namespace moefuse::test {

// The reference layer's views over a LayerData (reference layout).
struct RefInputs {
  LayerData d;
  ref::LayerWeights w;
  TensorView x;

  explicit RefInputs(const LayerData& data) : d(data) {
    const MoeConfig& c = d.c;
    const int64_t E = c.num_experts, H = c.hidden, F = c.ffn, fc1 = c.fc1_width();
    const MoeConfig s = shared_expert_config(c);
    auto f32 = [](std::vector<float>& v, std::initializer_list<int64_t> shape) {
      return v.empty() ? TensorView{} : TensorView::contiguous(v.data(), DType::kFloat32, shape);
    };
    w = {.w_router = f32(d.w_router, {E, H}),
         .score_bias = f32(d.score_bias, {E}),
         .experts = {.w1 = f32(d.w1, {E, fc1, H}),
                     .b1 = f32(d.b1, {E, fc1}),
                     .w2 = f32(d.w2, {E, H, F}),
                     .b2 = f32(d.b2, {E, H})},
         .shared_w1 = f32(d.sw1, {s.fc1_width(), H}),
         .shared_w2 = f32(d.sw2, {H, s.ffn})};
    x = f32(d.x, {d.T, H});
  }
};

// y against `want`: rel-norm within tol, no NaN, the worst element named by token and column.
// `what` starts with the recipe's name (it is printed with each error).
void expect_y(const std::vector<float>& got, const std::vector<float>& want, int64_t H,
              double tol, const std::string& what);

// A slice of the layer's weight region, downloaded.
template <class T>
std::vector<T> download_slice(const DeviceLayer& d, const layer::Slice& s) {
  std::vector<T> out(s.bytes / sizeof(T));
  MOEFUSE_CUDA_CHECK(cudaMemcpy(out.data(), d.fp8.data() + s.offset, s.bytes,
                                cudaMemcpyDeviceToHost));
  return out;
}

// Bitwise equality, the count of differing elements and the first one named.
template <class T>
void expect_same(const std::vector<T>& got, const std::vector<T>& want, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  size_t bad = 0, first = got.size();
  for (size_t i = 0; i < got.size(); ++i)
    if (std::memcmp(&got[i], &want[i], sizeof(T)) != 0) {
      if (first == got.size()) first = i;
      ++bad;
    }
  EXPECT_EQ(bad, 0u) << what << ": " << bad << " of " << got.size()
                     << " differ from the quantiser reference, first at [" << first << "]";
}

// Every gradient of `got` against `want` within tol(name), each error printed; the worst element
// (d_w1 / d_b1 in the reference [gate; up] order) and any NaN (an unwritten output) named.
void expect_gradients(const MoeConfig& c, int64_t T, const StepResult& got,
                      const StepResult& want, double (*tol)(const std::string&),
                      const std::string& what);

// prepare + forward + backward of a fused layer captured as ONE CUDA graph, replayed twice on new
// inputs in the same buffers: each replay passes `check` (its inputs and outputs) and equals an
// eager step bit for bit (the backward's two streams included).
void expect_graph_replays(const MoeConfig& c, int64_t T,
                          const std::function<void(const LayerData&, const StepResult&)>& check);

}  // namespace moefuse::test
