#include "gpu/layer_lowp_checks.h"

#include <cmath>
#include <cstdio>
#include <sstream>

#include "common/margins.h"

namespace moefuse::test {
namespace {

// A gradient's shape by name, to name the worst element by its indices.
std::vector<int64_t> gradient_shape(const MoeConfig& c, int64_t T, const std::string& name) {
  const int64_t E = c.num_experts, H = c.hidden, F = c.ffn, fc1 = c.fc1_width();
  const MoeConfig s = shared_expert_config(c);
  if (name == "dx") return {T, H};
  if (name == "d_w_router" || name == "d_b2") return {E, H};
  if (name == "d_w1") return {E, fc1, H};
  if (name == "d_w2") return {E, H, F};
  if (name == "d_b1") return {E, fc1};
  if (name == "d_shared_w1") return {s.fc1_width(), H};
  if (name == "d_shared_w2") return {H, s.ffn};
  return {};
}

std::string index_string(size_t i, const std::vector<int64_t>& shape) {
  std::vector<int64_t> idx(shape.size());
  for (size_t d = shape.size(); d-- > 0;) {
    idx[d] = static_cast<int64_t>(i % shape[d]);
    i /= shape[d];
  }
  std::ostringstream o;
  o << "[";
  for (size_t d = 0; d < idx.size(); ++d) o << (d ? ", " : "") << idx[d];
  o << "]";
  return o.str();
}

}  // namespace

void expect_y(const std::vector<float>& got, const std::vector<float>& want, int64_t H,
              double tol, const std::string& what) {
  ASSERT_EQ(got.size(), want.size());
  size_t nan = 0, worst = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::isnan(got[i])) ++nan;
    if (!(std::fabs(got[i] - want[i]) <= std::fabs(got[worst] - want[worst]))) worst = i;
  }
  EXPECT_EQ(nan, 0u) << what << ": " << nan << " NaN in y (unwritten or poisoned input)";
  const double err = rel_norm_error(got, want);
  record_margin("y", err, tol);
  EXPECT_LE(err, tol) << what << ": y rel-norm error " << err << "; worst token "
                      << worst / H << " column " << worst % H << ": got " << got[worst]
                      << " want " << want[worst];
  std::printf("[ layer ] %s: y rel-norm error %.4f (tolerance %.3f)\n", what.c_str(), err, tol);
}

void expect_gradients(const MoeConfig& c, int64_t T, const StepResult& got,
                      const StepResult& want, double (*tol)(const std::string&),
                      const std::string& what) {
  for (const auto& [name, w] : want.tensors) {
    if (name == "y" || name == "losses") continue;
    const std::vector<float>& g = got.at(name);
    ASSERT_EQ(g.size(), w.size()) << name;
    size_t nan = 0, worst = 0;
    for (size_t i = 0; i < g.size(); ++i) {
      if (std::isnan(g[i])) ++nan;
      if (!(std::fabs(g[i] - w[i]) <= std::fabs(g[worst] - w[worst]))) worst = i;
    }
    const double err = rel_norm_error(g, w), bound = tol(name);
    record_margin(name, err, bound);
    std::printf("[ layer ] %s: %-12s rel-norm error %.4f (tolerance %.3f)\n", what.c_str(),
                name.c_str(), err, bound);
    EXPECT_EQ(nan, 0u) << what << ": " << name << " has " << nan << " NaN (unwritten?)";
    EXPECT_LE(err, bound) << what << ": " << name << " rel-norm error " << err << "; worst "
                          << index_string(worst, gradient_shape(c, T, name)) << " got "
                          << g[worst] << " want " << w[worst];
  }
}

void expect_graph_replays(const MoeConfig& c, int64_t T,
                          const std::function<void(const LayerData&, const StepResult&)>& check) {
  const LayerOptions o{.mode = LayerMode::kFused};
  Stream stream;
  MoeLayer layer(c, o);
  DeviceLayer d(c, o, T);
  d.upload(LayerData::random(c, T));
  d.poison();
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  MOEFUSE_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  d.forward(layer, stream);  // prepare_fp8_weights + forward
  d.backward(layer, stream);
  MOEFUSE_CUDA_CHECK(cudaStreamEndCapture(stream, &graph));
  MOEFUSE_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
  for (int replay = 0; replay < 2; ++replay) {
    SCOPED_TRACE("replay " + std::to_string(replay) + " seed=" + std::to_string(seed()));
    const LayerData data = LayerData::random(c, T);
    d.upload(data);
    d.poison();
    MOEFUSE_CUDA_CHECK(cudaGraphLaunch(exec, stream));
    MOEFUSE_CUDA_CHECK(cudaStreamSynchronize(stream));
    const StepResult graphed = download(d);
    check(data, graphed);
    d.poison();
    d.forward(layer, stream);
    d.backward(layer, stream);
    MOEFUSE_CUDA_CHECK(cudaStreamSynchronize(stream));
    expect_same_bits(graphed, download(d), "graph vs eager:");
  }
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
}

}  // namespace moefuse::test
