// ops/math/groupnorm_leakyrelu_sum.h: the power-of-two forms of the group statistics (a product
// by 1 / count, which the fused GEMM's epilogue uses to leave out a division) give the bits of
// the general forms (a division by count) for every float, denormals, infinities and NaN
// included, at every power-of-two group size the epilogue takes and beyond.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "math/groupnorm_leakyrelu_sum.h"

namespace fusedops::testing {
namespace {

uint32_t bits(float v) {
  uint32_t u = 0;
  std::memcpy(&u, &v, sizeof(u));
  return u;
}

// Random bit patterns (every exponent, denormals, infinities and NaNs among them) and edge values.
std::vector<float> samples() {
  std::vector<float> values = {0.0f, -0.0f, 1.0f, -1.0f, std::numeric_limits<float>::min(),
                               std::numeric_limits<float>::denorm_min(),
                               std::numeric_limits<float>::max(),
                               -std::numeric_limits<float>::max(),
                               std::numeric_limits<float>::infinity(),
                               std::numeric_limits<float>::quiet_NaN()};
  std::mt19937 rng(62);
  std::uniform_int_distribution<uint32_t> any;
  for (int i = 0; i < 200000; ++i) {
    const uint32_t u = any(rng);
    float v = 0.0f;
    std::memcpy(&v, &u, sizeof(v));
    values.push_back(v);
  }
  return values;
}

// Equal bits, or both NaN (the payload is not specified).
void expect_same(float general, float pow2, float input, float count) {
  if (std::isnan(general) && std::isnan(pow2)) return;
  ASSERT_EQ(bits(general), bits(pow2)) << "input " << input << " (bits " << bits(input)
                                       << "), count " << count << ": " << general << " against "
                                       << pow2;
}

TEST(GroupNormMath, PowerOfTwoFormsMatchTheDivisionBitForBit) {
  const epilogues::GroupNormLeakyReluSum<float> chain{1e-5f, 0.01f};
  const std::vector<float> values = samples();
  for (const float count : {1.0f, 2.0f, 16.0f, 32.0f, 64.0f, 128.0f, 1024.0f, 65536.0f}) {
    const float inv_count = 1.0f / count;
    for (const float v : values) {
      expect_same(chain.mean(v, count), chain.mean_pow2(v, inv_count), v, count);
      // rstd takes sums of squares: non-negative values (negative ones are NaN either way).
      const float squares = std::fabs(v);
      expect_same(chain.rstd(squares, count), chain.rstd_pow2(squares, inv_count), squares, count);
    }
  }
}

// Not a power of two: the product by a rounded reciprocal is not the quotient, which is why the
// power-of-two forms are separate functions (this shows the test above can tell them apart).
TEST(GroupNormMath, OtherCountsDifferFromTheirProduct) {
  const epilogues::GroupNormLeakyReluSum<float> chain{1e-5f, 0.01f};
  int differ = 0;
  for (const float v : samples()) {
    if (std::isfinite(v) && bits(chain.mean(v, 12.0f)) != bits(chain.mean_pow2(v, 1.0f / 12.0f))) {
      ++differ;
    }
  }
  EXPECT_GT(differ, 0);
}

}  // namespace
}  // namespace fusedops::testing
