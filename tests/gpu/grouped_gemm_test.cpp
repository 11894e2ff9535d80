// The grouped GEMM on the GPU against an fp64 CPU reference on the same bf16-rounded inputs.
//
// Tolerances (relative norm): outputs that pass through bf16 carry its rounding, about 2^-9
// relative per element (≈ 1.1e-3 in norm); cuBLAS in bf16 gets the same. 5e-3 leaves room for the
// fp32 activation math and is 2× a cuBLAS-like 2.5e-3 bound. fp32 outputs of the fused kernel
// only carry fp32 accumulation error (≈ sqrt(K)·2^-24): 1e-4.
// Rows outside [offsets[0], offsets[E]) must keep their poison bit for bit.
#include <gtest/gtest.h>

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <numeric>
#include <string>
#include <thread>
#include <vector>

#include "common/fp8_operands.h"
#include "common/margins.h"
#include "common/test_util.h"
#include "cuda/check.h"
#include "moefuse/grouped_gemm.h"
#include "ref/expert_mlp.h"

namespace moefuse {
namespace {

#define CHECK_CUDA(call) ASSERT_EQ((call), cudaSuccess) << #call

uint16_t to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if (std::isnan(f)) return 0x7FC0;
  u += 0x7FFF + ((u >> 16) & 1);
  return static_cast<uint16_t>(u >> 16);
}
float from_bf16(uint16_t h) {
  const uint32_t u = uint32_t{h} << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
std::vector<uint16_t> to_bf16(const std::vector<float>& v) {
  std::vector<uint16_t> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = to_bf16(v[i]);
  return out;
}

struct DeviceBuffer {
  void* ptr = nullptr;
  size_t bytes = 0;
  explicit DeviceBuffer(size_t n) : bytes(n) {
    if (cudaMalloc(&ptr, std::max<size_t>(n, 16)) != cudaSuccess) ptr = nullptr;
  }
  ~DeviceBuffer() { cudaFree(ptr); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  template <class T>
  void upload(const std::vector<T>& v) {
    ASSERT_EQ(v.size() * sizeof(T), bytes);
    ASSERT_EQ(cudaMemcpy(ptr, v.data(), bytes, cudaMemcpyHostToDevice), cudaSuccess);
  }
  template <class T>
  std::vector<T> download() const {
    std::vector<T> v(bytes / sizeof(T));
    EXPECT_EQ(cudaMemcpy(v.data(), ptr, bytes, cudaMemcpyDeviceToHost), cudaSuccess);
    return v;
  }
  TensorView view(DType dtype, std::initializer_list<int64_t> shape) const {
    return TensorView::contiguous(ptr, dtype, shape, Device::kCuda);
  }
};

// Row counts per expert.
using test::uniform_counts;
std::vector<int> zipf_counts(int experts, int total) {
  std::vector<double> w(experts);
  for (int e = 0; e < experts; ++e) w[e] = 1.0 / std::pow(e + 1.0, 1.2);
  std::shuffle(w.begin(), w.end(), test::rng());
  std::discrete_distribution<int> pick(w.begin(), w.end());
  std::vector<int> c(experts, 0);
  for (int i = 0; i < total; ++i) ++c[pick(test::rng())];
  return c;
}

// How the gather index is drawn: uniform over [-2, T + 2) (a few rows read zeros), over
// [-T, 2T) (about two thirds do, whole tiles among them), or entirely outside [0, T).
enum class GatherIndex { kFewInvalid, kMostlyInvalid, kAllInvalid };

struct Case {
  std::vector<int> counts;
  int row_base = 0;     // offsets[0]: rows before it must stay untouched
  int spare_rows = 0;   // M_cap - offsets[E]
  int64_t n = 256, k = 128;
  bool activation = true;
  Activation act = Activation::kSwiGLU;
  bool bias = false, row_scale = false, pre = false, fp32_out = false, gather = false;
  bool unfused = false;
  GatherIndex index = GatherIndex::kFewInvalid;
  int max_ctas = 0;
};

struct Outcome {
  double d_error = 0, pre_error = 0;
  std::string untouched_violation;  // empty when every row outside the experts kept its poison
};

// Builds random inputs, runs the kernel (fused or unfused), and compares with the reference.
class Runner {
 public:
  explicit Runner(const Case& c) : c_(c) {
    experts_ = static_cast<int>(c.counts.size());
    offsets_.assign(experts_ + 1, c.row_base);
    for (int e = 0; e < experts_; ++e) offsets_[e + 1] = offsets_[e] + c.counts[e];
    m_cap_ = offsets_[experts_] + c.spare_rows;
    glu_ = c.activation && is_glu(c.act);
    n_out_ = glu_ ? c.n / 2 : c.n;
    tokens_ = c.gather ? std::max<int64_t>(1, m_cap_ / 2 + 3) : m_cap_;
    a_ = to_bf16(test::random_normal(tokens_ * c.k));
    b_ref_ = to_bf16(test::random_normal(experts_ * c.n * c.k, 1.0f / std::sqrt(float(c.k))));
    bias_ref_ = test::random_normal(experts_ * c.n, 0.5f);
    scale_ = test::random_uniform(m_cap_, 0.1f, 1.0f);
    if (c.gather) {
      const int t = static_cast<int>(tokens_);
      const int lo = c.index == GatherIndex::kFewInvalid      ? -2
                     : c.index == GatherIndex::kMostlyInvalid ? -t
                                                              : t;
      std::uniform_int_distribution<int> tok(lo, c.index == GatherIndex::kFewInvalid ? t + 1
                                                                                      : 2 * t - 1);
      index_.resize(m_cap_);
      for (int& t : index_) t = tok(test::rng());
    }
    auto buffer = [](int64_t bytes) { return std::make_unique<DeviceBuffer>(size_t(bytes)); };
    a_dev_ = buffer(tokens_ * c.k * 2);
    b_dev_ = buffer(experts_ * c.n * c.k * 2);
    bias_dev_ = buffer(experts_ * c.n * 4);
    scale_dev_ = buffer(m_cap_ * 4);
    offsets_dev_ = buffer((experts_ + 1) * 4);
    index_dev_ = buffer(c.gather ? m_cap_ * 4 : 0);
    d_dev_ = buffer(m_cap_ * n_out_ * (c.fp32_out ? 4 : 2));
    pre_dev_ = buffer(m_cap_ * c.n * 2);
    gathered_dev_ = buffer(c.gather ? m_cap_ * c.k * 2 : 0);
  }

  // Uploads (weights interleaved for GLU), poisons, runs once. Returns the args for replays.
  void run(cudaStream_t stream = nullptr) {
    upload_all();
    launch(stream);
  }
  void upload_all() {
    std::vector<uint16_t> b = b_ref_;
    std::vector<float> bias = bias_ref_;
    if (glu_) {
      interleave_glu_weight(TensorView::contiguous(b_ref_.data(), DType::kBFloat16,
                                                   {experts_, c_.n, c_.k}),
                            TensorView::contiguous(b.data(), DType::kBFloat16,
                                                   {experts_, c_.n, c_.k}));
      interleave_glu_weight(TensorView::contiguous(bias_ref_.data(), DType::kFloat32,
                                                   {experts_, c_.n}),
                            TensorView::contiguous(bias.data(), DType::kFloat32,
                                                   {experts_, c_.n}));
    }
    a_dev_->upload(a_);
    b_dev_->upload(b);
    bias_dev_->upload(bias);
    scale_dev_->upload(scale_);
    offsets_dev_->upload(offsets_);
    if (c_.gather) index_dev_->upload(index_);
    // Poison: all-ones is a NaN in bf16 and in fp32.
    ASSERT_EQ(cudaMemset(d_dev_->ptr, 0xFF, d_dev_->bytes), cudaSuccess);
    ASSERT_EQ(cudaMemset(pre_dev_->ptr, 0xFF, pre_dev_->bytes), cudaSuccess);
  }
  GroupedGemmArgs args() const {
    const DType out = c_.fp32_out ? DType::kFloat32 : DType::kBFloat16;
    GroupedGemmArgs g{.a = a_dev_->view(DType::kBFloat16, {tokens_, c_.k}),
                      .b = b_dev_->view(DType::kBFloat16, {experts_, c_.n, c_.k}),
                      .offsets = offsets_dev_->view(DType::kInt32, {experts_ + 1}),
                      .d = d_dev_->view(out, {m_cap_, n_out_}),
                      .epilogue = c_.activation ? GemmEpilogue::kActivation : GemmEpilogue::kLinear,
                      .activation = c_.act};
    if (c_.bias) g.bias = bias_dev_->view(DType::kFloat32, {experts_, c_.n});
    if (c_.row_scale) g.row_scale = scale_dev_->view(DType::kFloat32, {m_cap_});
    if (c_.pre || (c_.unfused && c_.activation))
      g.pre_activation = pre_dev_->view(DType::kBFloat16, {m_cap_, c_.n});
    if (c_.gather) g.gather_index = index_dev_->view(DType::kInt32, {m_cap_});
    g.max_ctas = c_.max_ctas;
    return g;
  }
  void launch(cudaStream_t stream) {
    if (c_.unfused)
      grouped_gemm_unfused(args(), {.gathered_a = gathered_dev_->view(DType::kBFloat16,
                                                                     {m_cap_, c_.k})},
                           stream);
    else
      grouped_gemm(args(), stream);
  }

  // New offsets (same total capacity) and new data, in place, for graph replays.
  void reshuffle(const std::vector<int>& counts) {
    offsets_.assign(experts_ + 1, c_.row_base);
    for (int e = 0; e < experts_; ++e) offsets_[e + 1] = offsets_[e] + counts[e];
    ASSERT_LE(offsets_[experts_], m_cap_);
    a_ = to_bf16(test::random_normal(tokens_ * c_.k));
    upload_all();
  }

  std::vector<uint8_t> raw_d() const { return d_dev_->download<uint8_t>(); }

  Outcome check() const {
    Outcome out;
    std::vector<float> d(m_cap_ * n_out_), pre(m_cap_ * c_.n);
    if (c_.fp32_out) {
      d = d_dev_->download<float>();
    } else {
      const auto raw = d_dev_->download<uint16_t>();
      for (size_t i = 0; i < raw.size(); ++i) d[i] = from_bf16(raw[i]);
    }
    const auto pre_raw = pre_dev_->download<uint16_t>();
    const auto d_bytes = d_dev_->download<uint8_t>();
    const auto pre_bytes = pre_dev_->download<uint8_t>();
    const int64_t d_row_bytes = n_out_ * (c_.fp32_out ? 4 : 2), pre_row_bytes = c_.n * 2;
    const bool pre_written = args().pre_activation.data != nullptr;
    for (int64_t r = 0; r < m_cap_; ++r) {
      if (r >= offsets_[0] && r < offsets_[experts_]) continue;
      const bool d_ok = std::all_of(d_bytes.begin() + r * d_row_bytes,
                                    d_bytes.begin() + (r + 1) * d_row_bytes,
                                    [](uint8_t b) { return b == 0xFF; });
      const bool pre_ok = !pre_written ||
                          std::all_of(pre_bytes.begin() + r * pre_row_bytes,
                                      pre_bytes.begin() + (r + 1) * pre_row_bytes,
                                      [](uint8_t b) { return b == 0xFF; });
      if (!d_ok || !pre_ok) {
        out.untouched_violation = "row " + std::to_string(r) + " outside the experts was written" +
                                  (d_ok ? " (pre_activation)" : " (d)");
        break;
      }
    }
    // Reference rows: all of them for small problems, else every expert's first and last row
    // plus a random sample.
    std::vector<int> rows;
    const int total = offsets_[experts_] - offsets_[0];
    if (int64_t{total} * c_.n * c_.k <= 400'000'000) {
      rows.resize(total);
      std::iota(rows.begin(), rows.end(), offsets_[0]);
    } else {
      for (int e = 0; e < experts_; ++e)
        if (offsets_[e + 1] > offsets_[e]) rows.push_back(offsets_[e]), rows.push_back(offsets_[e + 1] - 1);
      std::uniform_int_distribution<int> pick(offsets_[0], offsets_[experts_] - 1);
      // About 4e9 multiply-adds at most, whatever N and K.
      const size_t budget = std::clamp<size_t>(size_t(4e9 / double(c_.n * c_.k)), 16, 384);
      while (rows.size() < budget) rows.push_back(pick(test::rng()));
    }
    std::vector<float> got_d, got_pre;
    std::vector<double> want_d(rows.size() * n_out_), want_pre(rows.size() * c_.n);
    for (int r : rows) {
      got_d.insert(got_d.end(), d.begin() + int64_t{r} * n_out_, d.begin() + int64_t{r + 1} * n_out_);
      for (int64_t j = 0; j < c_.n; ++j) got_pre.push_back(from_bf16(pre_raw[int64_t{r} * c_.n + j]));
    }
    reference(rows, want_d, want_pre);
    out.d_error = test::rel_norm_error(got_d, want_d);
    if (pre_written) out.pre_error = test::rel_norm_error(got_pre, want_pre);
    return out;
  }

  double tolerance() const { return c_.fp32_out && !c_.unfused ? 1e-4 : 5e-3; }

 private:
  int expert_of(int row) const {
    return static_cast<int>(std::upper_bound(offsets_.begin(), offsets_.end(), row) -
                            offsets_.begin()) - 1;
  }
  // fp64 h, then bias, activation (reference [gate; up] layout), row scale. want_pre is in the
  // kernel's (interleaved for GLU) column order.
  void reference(const std::vector<int>& rows, std::vector<double>& want_d,
                 std::vector<double>& want_pre) const {
    MoeConfig config{.hidden = c_.k, .ffn = glu_ ? c_.n / 2 : c_.n, .num_experts = experts_,
                     .top_k = 1, .activation = c_.act};
    auto work = [&](size_t first, size_t step) {
      std::vector<double> h(c_.n), act(n_out_);
      for (size_t i = first; i < rows.size(); i += step) {
        const int r = rows[i], e = expert_of(r);
        const int token = c_.gather ? index_[r] : r;
        const bool valid = !c_.gather || (token >= 0 && token < tokens_);
        for (int64_t j = 0; j < c_.n; ++j) {
          double s = 0;
          if (valid)
            for (int64_t q = 0; q < c_.k; ++q)
              s += double(from_bf16(a_[token * c_.k + q])) *
                   double(from_bf16(b_ref_[(e * c_.n + j) * c_.k + q]));
          h[j] = s + (c_.bias ? bias_ref_[e * c_.n + j] : 0.0);
        }
        const double scale = c_.row_scale ? scale_[r] : 1.0;
        if (c_.activation) ref::activation_forward(config, h.data(), act.data());
        else act = h;
        for (int64_t j = 0; j < n_out_; ++j) want_d[i * n_out_ + j] = act[j] * scale;
        for (int64_t j = 0; j < c_.n; ++j)
          want_pre[i * c_.n + (glu_ ? glu_interleaved_row(j, c_.n / 2) : j)] = h[j];
      }
    };
    const size_t threads = std::max(1u, std::thread::hardware_concurrency());
    std::vector<std::thread> pool;
    for (size_t t = 0; t < threads; ++t) pool.emplace_back(work, t, threads);
    for (auto& t : pool) t.join();
  }

  Case c_;
  int experts_ = 0;
  std::vector<int> offsets_;
  int64_t m_cap_ = 0, n_out_ = 0, tokens_ = 0;
  bool glu_ = false;
  std::vector<uint16_t> a_, b_ref_;
  std::vector<float> bias_ref_, scale_;
  std::vector<int> index_;

 public:
  std::unique_ptr<DeviceBuffer> a_dev_, b_dev_, bias_dev_, scale_dev_, offsets_dev_, index_dev_,
      d_dev_, pre_dev_, gathered_dev_;
};

void run_case(const Case& c, const std::string& name) {
  SCOPED_TRACE(name + " (seed " + std::to_string(test::seed()) + ")");
  Runner runner(c);
  runner.run();
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess) << name;
  const Outcome o = runner.check();
  EXPECT_TRUE(o.untouched_violation.empty()) << o.untouched_violation;
  test::record_margin("d", o.d_error, runner.tolerance());
  test::record_margin("pre_activation", o.pre_error, 5e-3);
  EXPECT_LE(o.d_error, runner.tolerance()) << "d";
  EXPECT_LE(o.pre_error, 5e-3) << "pre_activation";
}

TEST(GroupedGemm, Fc1EveryActivationWithBiasAndPreActivation) {
  MOEFUSE_REQUIRE_HOPPER();
  for (Activation act : {Activation::kSwiGLU, Activation::kGeGLU, Activation::kReGLU,
                         Activation::kClampedSwiGLU, Activation::kSquaredReLU}) {
    // K = 200 (not a multiple of 64), ragged rows incl. empty. N = 400: 256-wide tiles, the last
    // one 144 columns; N = 384: 192-wide tiles (config.h narrow_width).
    for (int64_t n : {400, 384})
      run_case({.counts = {0, 1, 127, 129, 300, 0, 64, 257}, .row_base = 3, .spare_rows = 70,
                .n = n, .k = 200, .act = act, .bias = true, .pre = true},
               std::string(activation_name(act)) + ", N " + std::to_string(n));
  }
}

TEST(GroupedGemm, Fc2RowScaleAndBiasBf16AndFp32) {
  MOEFUSE_REQUIRE_HOPPER();
  for (bool fp32 : {false, true})
    run_case({.counts = uniform_counts(16, 1500), .spare_rows = 33, .n = 520, .k = 312,
              .activation = false, .bias = true, .row_scale = true, .fp32_out = fp32},
             fp32 ? "fp32 out" : "bf16 out");
}

// FC2 (linear, bias, row scale; K 200) at N = n_fc2 and FC1 (SwiGLU, bias, saved pre-activation;
// K 136) at N = n_fc1 over experts of 1, 0, 2, 3, 5 and 1 m-blocks, with as many CTAs as units,
// three, and one walking every unit.
void run_fc2_and_fc1_over_cta_counts(int64_t n_fc2, int64_t n_fc1) {
  const std::vector<int> counts = {100, 0, 256, 300, 600, 1};
  for (int max_ctas : {0, 3, 1}) {
    const std::string ctas = "max_ctas " + std::to_string(max_ctas);
    run_case({.counts = counts, .row_base = 5, .spare_rows = 9, .n = n_fc2, .k = 200,
              .activation = false, .bias = true, .row_scale = true, .max_ctas = max_ctas},
             "fc2, " + ctas);
    run_case({.counts = counts, .row_base = 5, .spare_rows = 9, .n = n_fc1, .k = 136,
              .bias = true, .pre = true, .max_ctas = max_ctas},
             "fc1, " + ctas);
  }
}

// The bf16-output kernel's 2-CTA clusters (src/cuda/gemm/cluster_scheduler.h): m-pairs sharing
// B, the odd last m-block's n-pairs sharing A, and with an odd n-block count a phantom (rank 1
// loads its half of A for rank 0 and writes nothing): N = 520 is three 256-column n-blocks (FC2,
// linear) and N = 1552 seven (FC1, SwiGLU). max_ctas 3 and 1 run one cluster, which then walks
// every unit.
TEST(GroupedGemm, ClusterPairsAndPhantoms) {
  MOEFUSE_REQUIRE_HOPPER();
  run_fc2_and_fc1_over_cta_counts(520, 1552);
}

// 192-wide tiles (config.h narrow_width; one CTA a tile): N = 576, three n-blocks (FC2, linear:
// staged and copied out by bulk copies) and N = 960, five (FC1); then a GLU with a row scale,
// which the epilogue warps apply.
TEST(GroupedGemm, NarrowTiles) {
  MOEFUSE_REQUIRE_HOPPER();
  run_fc2_and_fc1_over_cta_counts(576, 960);
  run_case({.counts = uniform_counts(16, 1500), .spare_rows = 33, .n = 576, .k = 312,
            .bias = true, .row_scale = true, .pre = true},
           "swiglu with row scale");
}

// One K block a tile (K = 48) and one CTA or one cluster walking every unit: the producer runs
// kStages units ahead of the consumers, the most it can, so the tile slots it hands them
// (common/tile_slots.cuh) go round their ring several times at that distance. FC2 with a bias
// and a row scale in 256-wide tiles (N = 520: clusters with a phantom) and 192-wide ones (N =
// 576), and the gather FC1.
TEST(GroupedGemm, OneKBlockTilesOnOneCta) {
  MOEFUSE_REQUIRE_HOPPER();
  const std::vector<int> counts = {300, 0, 129, 1000, 64, 0, 257, 5};
  for (int max_ctas : {1, 2}) {
    for (int64_t n : {520, 576})
      run_case({.counts = counts, .row_base = 3, .spare_rows = 7, .n = n, .k = 48,
                .activation = false, .bias = true, .row_scale = true, .max_ctas = max_ctas},
               "fc2, N " + std::to_string(n) + ", max_ctas " + std::to_string(max_ctas));
    run_case({.counts = counts, .spare_rows = 7, .n = 512, .k = 48, .bias = true, .pre = true,
              .gather = true, .max_ctas = max_ctas},
             "gather fc1, max_ctas " + std::to_string(max_ctas));
  }
}

TEST(GroupedGemm, SkewedRoutingAndOneExpertHoldingAllRows) {
  MOEFUSE_REQUIRE_HOPPER();
  run_case({.counts = zipf_counts(64, 3000), .spare_rows = 5, .n = 512, .k = 256}, "zipf");
  std::vector<int> hot(16, 0);
  hot[11] = 1000;
  run_case({.counts = hot, .n = 256, .k = 64, .activation = false}, "one hot expert");
}

TEST(GroupedGemm, NoRowsAtAllWritesNothing) {
  MOEFUSE_REQUIRE_HOPPER();
  run_case({.counts = std::vector<int>(32, 0), .row_base = 0, .spare_rows = 300, .pre = true},
           "all experts empty");
  run_case({.counts = std::vector<int>(4, 0), .n = 64, .k = 64}, "M_cap = 0");
}

// One medium case per preset at its K and N (FC1 with its activation; FC2 linear, scaled).
TEST(GroupedGemm, PresetShapes) {
  MOEFUSE_REQUIRE_HOPPER();
  for (std::string_view name : preset_names()) {
    const MoeConfig p = preset(name);
    // Few enough experts that drawing the random weights stays fast (about 4e7 elements; a
    // mixtral expert alone has 1.2e8, so it runs with one).
    const int64_t per_expert = p.fc1_width() * p.hidden;
    const int experts = static_cast<int>(
        std::clamp<int64_t>(40'000'000 / per_expert, 1, std::min<int64_t>(p.num_experts, 32)));
    const std::vector<int> counts = zipf_counts(experts, 2048);
    run_case({.counts = counts, .spare_rows = 17, .n = p.fc1_width(), .k = p.hidden,
              .act = p.activation, .bias = p.expert_bias, .pre = true},
             std::string(name) + " fc1");
    run_case({.counts = counts, .n = p.hidden, .k = p.ffn, .activation = false,
              .bias = p.expert_bias, .row_scale = true},
             std::string(name) + " fc2");
  }
}

TEST(GroupedGemm, GatherFusedFc1) {
  MOEFUSE_REQUIRE_HOPPER();
  run_case({.counts = {5, 0, 200, 131, 1, 400}, .row_base = 2, .spare_rows = 9, .n = 512,
            .k = 328, .bias = true, .row_scale = true, .pre = true, .gather = true},
           "gather swiglu");
}

// cp.async gather with the in-consumer epilogue: about three tiles per CTA (N = 2048 gives 8
// n-blocks, ~48 m-blocks on a 132-SM H200), K = 328 (6 K blocks, more than the 3 stages, with a
// K tail), an empty expert and experts whose row counts are not multiples of 128.
TEST(GroupedGemm, GatherFusedSeveralTilesPerCta) {
  MOEFUSE_REQUIRE_HOPPER();
  std::vector<int> counts = uniform_counts(12, 5000);
  counts[3] = 0;
  run_case({.counts = counts, .row_base = 1, .spare_rows = 40, .n = 2048, .k = 328, .bias = true,
            .row_scale = true, .pre = true, .gather = true},
           "gather swiglu, several tiles per CTA");
}

// Rows whose index is outside [0, T) must read zeros (h = bias): most rows, then every row
// (whole tiles with no row loaded: every cp.async of the tile has src-size 0). Non-GLU and linear
// epilogues of the gather instantiation.
TEST(GroupedGemm, GatherFusedOutOfRangeIndicesReadZeros) {
  MOEFUSE_REQUIRE_HOPPER();
  run_case({.counts = {130, 0, 1, 255, 128}, .spare_rows = 3, .n = 256, .k = 200,
            .act = Activation::kSquaredReLU, .bias = true, .pre = true, .gather = true,
            .index = GatherIndex::kMostlyInvalid},
           "gather squared relu, mostly invalid indices");
  run_case({.counts = {0, 300, 77}, .row_base = 5, .n = 264, .k = 64, .activation = false,
            .bias = true, .row_scale = true, .gather = true, .index = GatherIndex::kAllInvalid},
           "gather linear, all indices invalid");
  run_case({.counts = {200, 129}, .n = 512, .k = 136, .act = Activation::kGeGLU,
            .gather = true, .index = GatherIndex::kMostlyInvalid},
           "gather geglu without bias, mostly invalid indices");
}

TEST(GroupedGemm, UnfusedTwinMatchesTheReference) {
  MOEFUSE_REQUIRE_HOPPER();
  run_case({.counts = {0, 77, 300, 129}, .row_base = 1, .spare_rows = 20, .n = 384, .k = 192,
            .act = Activation::kClampedSwiGLU, .bias = true, .unfused = true},
           "unfused clamped swiglu");
  run_case({.counts = {33, 0, 250}, .spare_rows = 4, .n = 264, .k = 96, .activation = false,
            .bias = true, .row_scale = true, .fp32_out = true, .unfused = true},
           "unfused fc2 fp32");
  run_case({.counts = {40, 90}, .spare_rows = 4, .n = 256, .k = 136, .row_scale = true,
            .gather = true, .unfused = true},
           "unfused gather");
}

TEST(GroupedGemm, GraphReplayReadsNewOffsetsAndData) {
  MOEFUSE_REQUIRE_HOPPER();
  const Case c{.counts = {100, 0, 300, 57}, .spare_rows = 200, .n = 256, .k = 128, .bias = true,
               .row_scale = true, .pre = true};
  Runner runner(c);
  runner.upload_all();
  cudaStream_t stream;
  CHECK_CUDA(cudaStreamCreate(&stream));
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  CHECK_CUDA(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
  runner.launch(stream);
  CHECK_CUDA(cudaStreamEndCapture(stream, &graph));
  CHECK_CUDA(cudaGraphInstantiate(&exec, graph, 0));
  for (const std::vector<int>& counts :
       std::vector<std::vector<int>>{{0, 400, 0, 257}, {600, 1, 2, 3}, {0, 0, 0, 0}}) {
    runner.reshuffle(counts);
    CHECK_CUDA(cudaGraphLaunch(exec, stream));
    CHECK_CUDA(cudaStreamSynchronize(stream));
    const Outcome o = runner.check();
    EXPECT_TRUE(o.untouched_violation.empty()) << o.untouched_violation;
    EXPECT_LE(o.d_error, runner.tolerance()) << "counts " << counts[0] << "," << counts[1];
    EXPECT_LE(o.pre_error, 5e-3);
  }
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaStreamDestroy(stream);
}

TEST(GroupedGemm, BitwiseRepeatable) {
  MOEFUSE_REQUIRE_HOPPER();
  Runner runner({.counts = zipf_counts(32, 2000), .n = 768, .k = 512, .bias = true});
  runner.run();
  CHECK_CUDA(cudaDeviceSynchronize());
  const auto first = runner.raw_d();
  runner.launch(nullptr);
  CHECK_CUDA(cudaDeviceSynchronize());
  EXPECT_TRUE(first == runner.raw_d());
}

TEST(GroupedGemm, InterleaveOnTheDeviceMatchesTheHost) {
  MOEFUSE_REQUIRE_HOPPER();
  const int64_t e = 3, f = 40, h = 24;
  const std::vector<uint16_t> src = to_bf16(test::random_normal(e * 2 * f * h));
  std::vector<uint16_t> want(src.size()), got(src.size());
  interleave_glu_weight(TensorView::contiguous(const_cast<uint16_t*>(src.data()), DType::kBFloat16, {e, 2 * f, h}),
                        TensorView::contiguous(want.data(), DType::kBFloat16, {e, 2 * f, h}));
  DeviceBuffer s(src.size() * 2), d(src.size() * 2);
  s.upload(src);
  interleave_glu_weight(s.view(DType::kBFloat16, {e, 2 * f, h}), d.view(DType::kBFloat16, {e, 2 * f, h}));
  CHECK_CUDA(cudaDeviceSynchronize());
  got = d.download<uint16_t>();
  EXPECT_TRUE(got == want);
}

}  // namespace
}  // namespace moefuse
