// Order statistics of per-call latencies, as `bench` reports them.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

namespace fusedops_app {

// p99 is reported from this many samples on: below it, the 99th percentile lies between the
// two slowest calls and says nothing the maximum does not.
inline constexpr int64_t kMinSamplesForP99 = 100;
// torch.utils.benchmark's threshold: an interquartile range above 10% of the median "suggests
// significant environmental influence".
inline constexpr double kUnstableRelativeIqr = 0.10;

struct LatencySummary {
  int64_t samples = 0;
  double min_ms = 0.0;
  double median_ms = 0.0;
  double p90_ms = 0.0;
  std::optional<double> p99_ms;  // only from kMinSamplesForP99 samples on
  double q1_ms = 0.0;            // 25th percentile
  double q3_ms = 0.0;            // 75th percentile
  double iqr_ms = 0.0;           // q3 - q1
  double max_ms = 0.0;
  double mean_ms = 0.0;

  // The spread as a fraction of the median (0 for a median of 0).
  double relative_iqr() const;
  bool unstable() const { return relative_iqr() > kUnstableRelativeIqr; }
};

// Percentiles interpolate linearly between the two nearest samples (numpy.quantile's and
// torch.quantile's default). Throws std::invalid_argument for no samples.
LatencySummary summarize_latencies(std::vector<double> samples_ms);

}  // namespace fusedops_app
