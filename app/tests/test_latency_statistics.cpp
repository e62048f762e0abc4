// bench's latency statistics on samples whose order statistics are known by hand.
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <random>
#include <stdexcept>
#include <vector>

#include "latency_statistics.h"

using namespace fusedops_app;

namespace {

// 1, 2, ..., n milliseconds, shuffled: the summary must not depend on the order.
std::vector<double> one_to(int n) {
  std::vector<double> samples(static_cast<size_t>(n));
  std::iota(samples.begin(), samples.end(), 1.0);
  std::shuffle(samples.begin(), samples.end(), std::mt19937(7));
  return samples;
}

TEST(LatencyStatistics, PercentilesInterpolateBetweenSamples) {
  // numpy.quantile(range(1, 11), [0.5, 0.9, 0.25, 0.75]) = 5.5, 9.1, 3.25, 7.75
  const LatencySummary s = summarize_latencies(one_to(10));
  EXPECT_EQ(s.samples, 10);
  EXPECT_DOUBLE_EQ(s.min_ms, 1.0);
  EXPECT_DOUBLE_EQ(s.max_ms, 10.0);
  EXPECT_NEAR(s.median_ms, 5.5, 1e-12);
  EXPECT_NEAR(s.p90_ms, 9.1, 1e-12);
  EXPECT_NEAR(s.q1_ms, 3.25, 1e-12);
  EXPECT_NEAR(s.q3_ms, 7.75, 1e-12);
  EXPECT_NEAR(s.iqr_ms, 4.5, 1e-12);
  EXPECT_NEAR(s.mean_ms, 5.5, 1e-12);
}

// The maximum of 10 samples is not a 99th percentile: none is reported below 100 samples.
TEST(LatencyStatistics, P99OnlyFromOneHundredSamples) {
  EXPECT_FALSE(summarize_latencies(one_to(10)).p99_ms.has_value());
  EXPECT_FALSE(summarize_latencies(one_to(kMinSamplesForP99 - 1)).p99_ms.has_value());
  const LatencySummary s = summarize_latencies(one_to(kMinSamplesForP99));
  ASSERT_TRUE(s.p99_ms.has_value());
  EXPECT_NEAR(*s.p99_ms, 99.01, 1e-12);  // numpy.quantile(range(1, 101), 0.99)
}

TEST(LatencyStatistics, UnstableWhenTheIqrExceedsTenPercentOfTheMedian) {
  // 100 calls at 1 ms and one slow outlier: the IQR is 0, stable.
  std::vector<double> steady(100, 1.0);
  steady.push_back(50.0);
  const LatencySummary calm = summarize_latencies(steady);
  EXPECT_DOUBLE_EQ(calm.iqr_ms, 0.0);
  EXPECT_FALSE(calm.unstable());
  // Half the calls at 1 ms, half at 1.3 ms: the IQR is 0.3 ms, about 26% of the median.
  std::vector<double> bimodal(50, 1.0);
  bimodal.insert(bimodal.end(), 50, 1.3);
  const LatencySummary noisy = summarize_latencies(bimodal);
  EXPECT_NEAR(noisy.relative_iqr(), 0.3 / 1.15, 1e-12);
  EXPECT_TRUE(noisy.unstable());
  // 1 to 10 ms: IQR 4.5 of median 5.5.
  EXPECT_TRUE(summarize_latencies(one_to(10)).unstable());
}

TEST(LatencyStatistics, OneSampleAndNone) {
  const LatencySummary one = summarize_latencies({0.25});
  EXPECT_DOUBLE_EQ(one.min_ms, 0.25);
  EXPECT_DOUBLE_EQ(one.median_ms, 0.25);
  EXPECT_DOUBLE_EQ(one.p90_ms, 0.25);
  EXPECT_DOUBLE_EQ(one.iqr_ms, 0.0);
  EXPECT_THROW(summarize_latencies({}), std::invalid_argument);
}

}  // namespace
