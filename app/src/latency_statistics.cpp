#include "latency_statistics.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <stdexcept>

namespace fusedops_app {

namespace {

// q in [0, 1] of sorted, non-empty samples.
double quantile(const std::vector<double>& sorted, double q) {
  const double position = q * static_cast<double>(sorted.size() - 1);
  const auto below = static_cast<size_t>(std::floor(position));
  const size_t above = std::min(below + 1, sorted.size() - 1);
  const double fraction = position - static_cast<double>(below);
  return sorted[below] + fraction * (sorted[above] - sorted[below]);
}

}  // namespace

double LatencySummary::relative_iqr() const {
  return median_ms > 0.0 ? iqr_ms / median_ms : 0.0;
}

LatencySummary summarize_latencies(std::vector<double> samples_ms) {
  if (samples_ms.empty()) {
    throw std::invalid_argument("summarize_latencies: no samples");
  }
  std::sort(samples_ms.begin(), samples_ms.end());
  LatencySummary summary;
  summary.samples = static_cast<int64_t>(samples_ms.size());
  summary.min_ms = samples_ms.front();
  summary.max_ms = samples_ms.back();
  summary.median_ms = quantile(samples_ms, 0.5);
  summary.p90_ms = quantile(samples_ms, 0.9);
  if (summary.samples >= kMinSamplesForP99) {
    summary.p99_ms = quantile(samples_ms, 0.99);
  }
  summary.q1_ms = quantile(samples_ms, 0.25);
  summary.q3_ms = quantile(samples_ms, 0.75);
  summary.iqr_ms = summary.q3_ms - summary.q1_ms;
  summary.mean_ms = std::accumulate(samples_ms.begin(), samples_ms.end(), 0.0) /
                    static_cast<double>(samples_ms.size());
  return summary;
}

}  // namespace fusedops_app
