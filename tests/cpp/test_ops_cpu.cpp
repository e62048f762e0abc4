// Each operator on CPU through the C++ API against the ATen composite of its reference chain,
// in float64 and float32, at odd sizes: batch 1 and 3, widths 1000 and 1023, pool kernels
// that do not divide the width, one group and one channel per group.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <fusedops/fusedops.h>

#include <cmath>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "reference.h"

namespace fusedops::testing {
namespace {

// nn.Linear's initialization range, so that outputs have the reference models' scale.
at::Tensor linear_weight(int64_t out, int64_t in, at::ScalarType dtype) {
  const double bound = 1.0 / std::sqrt(static_cast<double>(in));
  return (at::rand({out, in}, dtype) * 2 - 1) * bound;
}
at::Tensor linear_bias(int64_t out, int64_t in, at::ScalarType dtype) {
  const double bound = 1.0 / std::sqrt(static_cast<double>(in));
  return (at::rand({out}, dtype) * 2 - 1) * bound;
}
// torch.rand on even steps (the public benchmark), torch.randn on odd ones (the originals).
at::Tensor input(int64_t batch, int64_t in, at::ScalarType dtype, int step) {
  return step % 2 == 0 ? at::rand({batch, in}, dtype) : at::randn({batch, in}, dtype);
}
std::string Describe(at::ScalarType dtype, int64_t batch, const std::string& sizes) {
  return DtypeName(dtype) + " batch=" + std::to_string(batch) + " " + sizes;
}

class OpsCpu : public ::testing::TestWithParam<at::ScalarType> {
 protected:
  void SetUp() override { at::manual_seed(20240 + static_cast<int>(GetParam())); }
  at::ScalarType dtype() const { return GetParam(); }
};

INSTANTIATE_TEST_SUITE_P(Dtypes, OpsCpu, ::testing::Values(at::kDouble, at::kFloat),
                         [](const auto& info) { return DtypeName(info.param); });

const int64_t kBatches[] = {1, 3, 64};

// ---- model 98 ------------------------------------------------------------------------------

struct Case98 {
  int64_t in, out, k;
  double scale;
};

TEST_P(OpsCpu, MatmulAvgpoolGeluScaleMax) {
  const Case98 cases[] = {{1023, 1000, 7, 2.0},   // 142 windows, the last 6 features dropped
                          {1000, 1023, 16, 2.0},  // 63 windows, 15 dropped
                          {1000, 1000, 3, -1.5},  // negative scale: max of -1.5 * gelu
                          {64, 50, 50, 1.0},      // one window
                          {17, 5, 1, 3.0},        // no pooling
                          {1, 1, 1, 2.0}};
  int step = 0;
  for (const Case98& c : cases) {
    const at::Tensor w = linear_weight(c.out, c.in, dtype());
    const at::Tensor b = linear_bias(c.out, c.in, dtype());
    for (int64_t batch : kBatches) {
      SCOPED_TRACE(Describe(dtype(), batch,
                            "in=" + std::to_string(c.in) + " out=" + std::to_string(c.out) +
                                " k=" + std::to_string(c.k) + " scale=" + std::to_string(c.scale)));
      const at::Tensor x = input(batch, c.in, dtype(), step++);
      const at::Tensor out = fusedops::matmul_avgpool_gelu_scale_max(x, w, b, c.k, c.scale);
      EXPECT_TRUE(AllClose(out, reference98(x, w, b, c.k, c.scale), tolerance_for(dtype())));
    }
  }
}

// ---- model 18 ------------------------------------------------------------------------------

TEST_P(OpsCpu, MatmulSumMaxAvgpoolLogsumexpLogsumexp) {
  const std::pair<int64_t, int64_t> cases[] = {{1000, 1023}, {1023, 1000}, {1, 1}, {17, 5}};
  int step = 0;
  for (auto [in, out] : cases) {
    const at::Tensor w = linear_weight(out, in, dtype());
    const at::Tensor b = linear_bias(out, in, dtype());
    for (int64_t batch : kBatches) {
      SCOPED_TRACE(Describe(dtype(), batch,
                            "in=" + std::to_string(in) + " out=" + std::to_string(out)));
      const at::Tensor x = input(batch, in, dtype(), step++);
      const at::Tensor result = fusedops::matmul_sum_max_avgpool_logsumexp_logsumexp(x, w, b);
      EXPECT_TRUE(AllClose(result, reference18(x, w, b), tolerance_for(dtype())));
    }
  }
}

// ---- model 39 ------------------------------------------------------------------------------

struct BatchNormState {
  at::Tensor gamma, beta, running_mean, running_var, num_batches_tracked;

  // Known, non-trivial statistics: an update that skips or doubles a term shows.
  static BatchNormState Make(int64_t out, at::ScalarType dtype) {
    BatchNormState s;
    s.gamma = at::rand({out}, dtype) + 0.5;
    s.beta = at::randn({out}, dtype) * 0.5;
    s.running_mean = at::full({out}, 0.25, dtype);
    s.running_var = at::full({out}, 1.5, dtype);
    s.num_batches_tracked = at::full({}, 7, at::kLong);
    return s;
  }
  BatchNormState Clone() const {
    return {gamma.clone(), beta.clone(), running_mean.clone(), running_var.clone(),
            num_batches_tracked.clone()};
  }
};

::testing::AssertionResult SameStatistics(const BatchNormState& a, const BatchNormState& b,
                                          at::ScalarType dtype) {
  const Tolerance tol = dtype == at::kDouble ? Tolerance{/*atol=*/1e-12, /*rtol=*/1e-10}
                                                  : Tolerance{/*atol=*/1e-6, /*rtol=*/1e-4};
  auto mean = AllClose(a.running_mean, b.running_mean, tol);
  if (!mean) return mean << " (running_mean)";
  auto var = AllClose(a.running_var, b.running_var, tol);
  if (!var) return var << " (running_var)";
  if (!a.num_batches_tracked.equal(b.num_batches_tracked)) {
    return ::testing::AssertionFailure()
           << "num_batches_tracked " << a.num_batches_tracked.item<int64_t>() << " != "
           << b.num_batches_tracked.item<int64_t>();
  }
  return ::testing::AssertionSuccess();
}

TEST_P(OpsCpu, GemmScaleBatchnormScaleShapesTrainAndEval) {
  const int64_t in = 1000, out = 1023;
  const at::Tensor w = linear_weight(out, in, dtype());
  const at::Tensor b = linear_bias(out, in, dtype());
  const std::vector<std::vector<int64_t>> scale_shapes = {{out}, {1}, {1, out}, {}};
  int step = 0;
  for (const auto& shape : scale_shapes) {
    const at::Tensor scale = at::randn(shape, dtype());
    for (bool training : {true, false}) {
      for (int64_t batch : kBatches) {
        if (training && batch == 1) continue;  // an error: TEST(Errors, ...)
        SCOPED_TRACE(Describe(dtype(), batch,
                              std::string(training ? "train" : "eval") +
                                  " scale_shape=" + c10::str(at::IntArrayRef(shape))));
        BatchNormState ours = BatchNormState::Make(out, dtype());
        BatchNormState expected = ours.Clone();
        const at::Tensor x = input(batch, in, dtype(), step++);
        const at::Tensor result = fusedops::gemm_scale_batchnorm(
            x, w, b, scale, ours.gamma, ours.beta, ours.running_mean, ours.running_var,
            ours.num_batches_tracked, training, 0.1, 1e-5);
        const at::Tensor reference = reference39(
            x, w, b, scale, expected.gamma, expected.beta, expected.running_mean,
            expected.running_var, expected.num_batches_tracked, training, 0.1, 1e-5);
        EXPECT_TRUE(AllClose(result, reference, tolerance_for(dtype())));
        EXPECT_TRUE(SameStatistics(ours, expected, dtype()));
      }
    }
  }
}

TEST_P(OpsCpu, GemmScaleBatchnormRunningStatisticsOverSteps) {
  const int64_t in = 96, out = 80;
  const at::Tensor w = linear_weight(out, in, dtype());
  const at::Tensor b = linear_bias(out, in, dtype());
  const at::Tensor scale = at::randn({out}, dtype());
  for (std::optional<double> momentum : {std::optional<double>(0.1), std::optional<double>(),
                                         std::optional<double>(0.5)}) {
    SCOPED_TRACE(momentum ? "momentum=" + std::to_string(*momentum) : "momentum=None");
    BatchNormState ours = BatchNormState::Make(out, dtype());
    BatchNormState expected = ours.Clone();
    int step = 0;
    for (int64_t batch : {64, 3, 17, 2, 64}) {
      SCOPED_TRACE("step " + std::to_string(step) + " batch " + std::to_string(batch));
      const at::Tensor x = input(batch, in, dtype(), step++);
      const at::Tensor result = fusedops::gemm_scale_batchnorm(
          x, w, b, scale, ours.gamma, ours.beta, ours.running_mean, ours.running_var,
          ours.num_batches_tracked, /*training=*/true, momentum, 1e-5);
      const at::Tensor reference = reference39(
          x, w, b, scale, expected.gamma, expected.beta, expected.running_mean,
          expected.running_var, expected.num_batches_tracked, true, momentum, 1e-5);
      EXPECT_TRUE(AllClose(result, reference, tolerance_for(dtype())));
      ASSERT_TRUE(SameStatistics(ours, expected, dtype()));
    }
    EXPECT_EQ(ours.num_batches_tracked.item<int64_t>(), 7 + 5);
    // eval after training uses the statistics the steps produced, and leaves them alone
    const at::Tensor x = input(33, in, dtype(), 1);
    const at::Tensor mean_before = ours.running_mean.clone();
    const at::Tensor result = fusedops::gemm_scale_batchnorm(
        x, w, b, scale, ours.gamma, ours.beta, ours.running_mean, ours.running_var,
        ours.num_batches_tracked, /*training=*/false, momentum, 1e-5);
    const at::Tensor reference = reference39(
        x, w, b, scale, expected.gamma, expected.beta, expected.running_mean,
        expected.running_var, expected.num_batches_tracked, false, momentum, 1e-5);
    EXPECT_TRUE(AllClose(result, reference, tolerance_for(dtype())));
    EXPECT_TRUE(ours.running_mean.equal(mean_before));
    EXPECT_TRUE(SameStatistics(ours, expected, dtype()));
  }
}

// ---- model 62 ------------------------------------------------------------------------------

struct Case62 {
  int64_t in, hidden, groups;
};

TEST_P(OpsCpu, MatmulGroupnormLeakyreluSum) {
  const Case62 cases[] = {{1000, 1000, 8},    {1000, 1000, 1},    {1000, 1000, 1000},
                          {1000, 1000, 40},   {1023, 1023, 31},   {17, 6, 3}};
  int step = 0;
  for (const Case62& c : cases) {
    const at::Tensor w = linear_weight(c.hidden, c.in, dtype());
    const at::Tensor b = linear_bias(c.hidden, c.in, dtype());
    const at::Tensor gamma = at::randn({c.hidden}, dtype());
    const at::Tensor beta = at::randn({c.hidden}, dtype());
    for (int64_t batch : kBatches) {
      // One value per (sample, group) is rejected, as GroupNorm rejects it (Errors tests).
      if (batch * (c.hidden / c.groups) == 1) continue;
      for (auto [eps, slope] : {std::pair<double, double>{1e-5, 0.01}, {1e-3, 0.2}}) {
        SCOPED_TRACE(Describe(dtype(), batch,
                              "in=" + std::to_string(c.in) +
                                  " hidden=" + std::to_string(c.hidden) +
                                  " groups=" + std::to_string(c.groups) +
                                  " eps=" + std::to_string(eps) +
                                  " slope=" + std::to_string(slope)));
        const at::Tensor x = input(batch, c.in, dtype(), step++);
        const at::Tensor out =
            fusedops::matmul_groupnorm_leakyrelu_sum(x, w, b, c.groups, gamma, beta, eps, slope);
        EXPECT_TRUE(AllClose(out, reference62(x, w, b, c.groups, gamma, beta, eps, slope),
                             tolerance_for(dtype())));
      }
    }
  }
}

// ---- shared behaviour ----------------------------------------------------------------------

TEST_P(OpsCpu, EmptyBatch) {
  const at::Tensor x = at::empty({0, 32}, dtype());
  const at::Tensor w = linear_weight(48, 32, dtype());
  const at::Tensor b = linear_bias(48, 32, dtype());
  EXPECT_TRUE(AllClose(fusedops::matmul_avgpool_gelu_scale_max(x, w, b, 5, 2.0),
                       reference98(x, w, b, 5, 2.0), tolerance_for(dtype())));
  EXPECT_TRUE(AllClose(fusedops::matmul_sum_max_avgpool_logsumexp_logsumexp(x, w, b),
                       reference18(x, w, b), tolerance_for(dtype())));
  const at::Tensor gamma = at::randn({48}, dtype()), beta = at::randn({48}, dtype());
  EXPECT_TRUE(
      AllClose(fusedops::matmul_groupnorm_leakyrelu_sum(x, w, b, 6, gamma, beta, 1e-5, 0.01),
               reference62(x, w, b, 6, gamma, beta, 1e-5, 0.01), tolerance_for(dtype())));
  BatchNormState ours = BatchNormState::Make(48, dtype());
  BatchNormState expected = ours.Clone();
  const at::Tensor scale = at::randn({48}, dtype());
  const at::Tensor result = fusedops::gemm_scale_batchnorm(
      x, w, b, scale, ours.gamma, ours.beta, ours.running_mean, ours.running_var,
      ours.num_batches_tracked, false, 0.1, 1e-5);
  EXPECT_TRUE(AllClose(result,
                       reference39(x, w, b, scale, expected.gamma, expected.beta,
                                   expected.running_mean, expected.running_var,
                                   expected.num_batches_tracked, false, 0.1, 1e-5),
                       tolerance_for(dtype())));
}

TEST_P(OpsCpu, NonContiguousInputs) {
  const int64_t in = 1000, out = 1023;
  const at::Tensor w = linear_weight(out, in, dtype());
  const at::Tensor b = linear_bias(out, in, dtype());
  const at::Tensor wide = at::randn({64, 2 * in + 5}, dtype());
  const at::Tensor views[] = {at::randn({64, in}, dtype()).t().contiguous().t(),
                              wide.narrow(1, 5, in), wide.slice(1, 1, 2 * in, 2)};
  const at::Tensor w_t = w.t().contiguous().t();  // column-major weight
  for (const at::Tensor& x : views) {
    ASSERT_FALSE(x.is_contiguous());
    EXPECT_TRUE(AllClose(fusedops::matmul_avgpool_gelu_scale_max(x, w_t, b, 7, 2.0),
                         reference98(x, w, b, 7, 2.0), tolerance_for(dtype())));
    EXPECT_TRUE(AllClose(fusedops::matmul_sum_max_avgpool_logsumexp_logsumexp(x, w_t, b),
                         reference18(x, w, b), tolerance_for(dtype())));
    const at::Tensor gamma = at::randn({out}, dtype()), beta = at::randn({out}, dtype());
    EXPECT_TRUE(AllClose(
        fusedops::matmul_groupnorm_leakyrelu_sum(x, w_t, b, 31, gamma, beta, 1e-5, 0.01),
        reference62(x, w, b, 31, gamma, beta, 1e-5, 0.01), tolerance_for(dtype())));
    BatchNormState ours = BatchNormState::Make(out, dtype());
    BatchNormState expected = ours.Clone();
    const at::Tensor scale = at::randn({out}, dtype());
    const at::Tensor result = fusedops::gemm_scale_batchnorm(
        x, w_t, b, scale, ours.gamma, ours.beta, ours.running_mean, ours.running_var,
        ours.num_batches_tracked, true, 0.1, 1e-5);
    EXPECT_TRUE(AllClose(result,
                         reference39(x, w, b, scale, expected.gamma, expected.beta,
                                     expected.running_mean, expected.running_var,
                                     expected.num_batches_tracked, true, 0.1, 1e-5),
                         tolerance_for(dtype())));
    EXPECT_TRUE(SameStatistics(ours, expected, dtype()));
  }
}

TEST_P(OpsCpu, NonFiniteRowsFollowTheReference) {
  // With mixed-sign weights an infinite x entry makes +inf and -inf outputs: their sum or
  // mean is NaN in the reference, whatever an algebraic fold would say.
  const int64_t in = 40;
  for (int64_t out : {60, 61, 1}) {
    const at::Tensor w = linear_weight(out, in, dtype());
    const at::Tensor b = linear_bias(out, in, dtype());
    at::Tensor x = at::randn({8, in}, dtype());
    const double inf = std::numeric_limits<double>::infinity();
    x.index_put_({1, 3}, inf);
    x.index_put_({2, 0}, -inf);
    x.index_put_({3, in - 1}, std::numeric_limits<double>::quiet_NaN());
    x.index_put_({4, 1}, inf);
    x.index_put_({4, 2}, -inf);
    x[5].fill_(inf);
    for (const at::Tensor& weight : {w, w.abs()}) {
      SCOPED_TRACE("out=" + std::to_string(out));
      const at::Tensor r18 = fusedops::matmul_sum_max_avgpool_logsumexp_logsumexp(x, weight, b);
      const at::Tensor e18 = reference18(x, weight, b, /*without_blas=*/true);
      EXPECT_TRUE(r18.isnan().equal(e18.isnan())) << r18 << e18;
      EXPECT_TRUE(r18.isposinf().equal(e18.isposinf())) << r18 << e18;
      EXPECT_TRUE(r18.isneginf().equal(e18.isneginf())) << r18 << e18;
      const int64_t k = std::min<int64_t>(out, 3);
      for (double scale : {2.0, -1.5}) {
        const at::Tensor r98 = fusedops::matmul_avgpool_gelu_scale_max(x, weight, b, k, scale);
        const at::Tensor e98 = reference98(x, weight, b, k, scale, /*without_blas=*/true);
        EXPECT_TRUE(r98.isnan().equal(e98.isnan())) << r98 << e98;
        EXPECT_TRUE(r98.isposinf().equal(e98.isposinf())) << r98 << e98;
        EXPECT_TRUE(r98.isneginf().equal(e98.isneginf())) << r98 << e98;
      }
    }
  }
}

}  // namespace
}  // namespace fusedops::testing
