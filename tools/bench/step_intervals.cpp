#include "bench/step_intervals.h"

#include <algorithm>
#include <utility>

#include "cuda/check.h"
#include "moefuse/error.h"

namespace moefuse::bench {
namespace {

using Interval = std::pair<double, double>;

// Sorted, disjoint, covering the same points.
std::vector<Interval> merged(std::vector<Interval> v) {
  std::sort(v.begin(), v.end());
  std::vector<Interval> out;
  for (const Interval& i : v) {
    if (!out.empty() && i.first <= out.back().second)
      out.back().second = std::max(out.back().second, i.second);
    else
      out.push_back(i);
  }
  return out;
}

double length(const std::vector<Interval>& v) {
  double sum = 0;
  for (const Interval& i : v) sum += i.second - i.first;
  return sum;
}

// |a ∩ b| for sorted disjoint lists.
double overlap(const std::vector<Interval>& a, const std::vector<Interval>& b) {
  double sum = 0;
  size_t j = 0;
  for (const Interval& i : a)
    for (size_t k = j; k < b.size() && b[k].first < i.second; ++k) {
      sum += std::max(0.0, std::min(i.second, b[k].second) - std::max(i.first, b[k].first));
      if (b[k].second <= i.second) j = k + 1;
    }
  return sum;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

float elapsed_ms(cudaEvent_t from, cudaEvent_t to) {
  float ms = 0;
  MOEFUSE_CUDA_CHECK(cudaEventElapsedTime(&ms, from, to));
  return ms;
}

}  // namespace

bool is_transfer(LayerStage s) {
  return s == LayerStage::kEpDispatch || s == LayerStage::kEpReturn ||
         s == LayerStage::kEpDispatchBackward || s == LayerStage::kEpReturnBackward;
}

StepIntervals::~StepIntervals() {
  for (cudaEvent_t e : steps_) cudaEventDestroy(e);
  for (const auto& step : runs_)
    for (const Run& r : step) cudaEventDestroy(r.begin), cudaEventDestroy(r.end);
}

cudaEvent_t StepIntervals::record(cudaStream_t stream) {
  cudaEvent_t e = nullptr;
  MOEFUSE_CUDA_CHECK(cudaEventCreate(&e));
  MOEFUSE_CUDA_CHECK(cudaEventRecord(e, stream));
  return e;
}

void StepIntervals::start_step(cudaStream_t stream) {
  steps_.push_back(record(stream));
  runs_.emplace_back();
}

void StepIntervals::begin(LayerStage stage, cudaStream_t stream) {
  MOEFUSE_EXPECT(!runs_.empty(), "StepIntervals", "start_step before the first stage", "none");
  runs_.back().push_back({stage, record(stream), nullptr});
}

void StepIntervals::end(LayerStage stage, cudaStream_t stream) {
  // Stages do not nest: the last run of `stage` begun is the one ending.
  for (auto it = runs_.back().rbegin(); it != runs_.back().rend(); ++it)
    if (it->stage == stage && it->end == nullptr) {
      it->end = record(stream);
      return;
    }
  throw Error("StepIntervals: end of a stage that did not begin");
}

StepIntervals::Medians StepIntervals::medians() const {
  std::map<LayerStage, std::vector<double>> per_stage;
  std::vector<double> transfer, exposed;
  for (size_t s = 0; s < steps_.size(); ++s) {
    std::map<LayerStage, double> sums;
    std::vector<Interval> moving, computing;
    for (const Run& r : runs_[s]) {
      const Interval i{elapsed_ms(steps_[s], r.begin), elapsed_ms(steps_[s], r.end)};
      sums[r.stage] += i.second - i.first;
      (is_transfer(r.stage) ? moving : computing).push_back(i);
    }
    for (const auto& [stage, ms] : sums) per_stage[stage].push_back(ms);
    const std::vector<Interval> t = merged(moving), c = merged(computing);
    transfer.push_back(length(t));
    exposed.push_back(length(t) - overlap(t, c));
  }
  Medians m;
  for (const auto& [stage, v] : per_stage) m.stage_ms[stage] = median(v);
  m.transfer_ms = median(transfer);
  m.exposed_transfer_ms = median(exposed);
  return m;
}

}  // namespace moefuse::bench
