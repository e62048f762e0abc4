// The library as a C++ dependency: linking it registers the operators, the API calls them, and
// the fold helpers compute what their algebra says.
#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <gtest/gtest.h>

#include <fusedops/fusedops.h>

#include <fstream>
#include <string>
#include <utility>

#include "reference.h"

namespace fusedops::testing {
namespace {

constexpr const char* kOperators[] = {
    "fusedops::matmul_avgpool_gelu_scale_max",
    "fusedops::matmul_sum_max_avgpool_logsumexp_logsumexp",
    "fusedops::gemm_scale_batchnorm",
    "fusedops::matmul_groupnorm_leakyrelu_sum",
    "fusedops::avgpool_fold_linear",
    "fusedops::sum_fold_linear",
    "fusedops::gemm_nt",
    "fusedops::groupnorm_leakyrelu_sum_backward",
    "fusedops::avgpool_gelu_scale_max_backward",
};

TEST(Registration, EveryOperatorHasSchemaCpuAndMetaKernels) {
  for (const char* name : kOperators) {
    SCOPED_TRACE(name);
    auto handle = c10::Dispatcher::singleton().findSchema({name, ""});
    ASSERT_TRUE(handle.has_value()) << name << " is not registered: libfusedops not loaded?";
    EXPECT_TRUE(handle->hasKernelForDispatchKey(c10::DispatchKey::CPU));
    EXPECT_TRUE(handle->hasKernelForDispatchKey(c10::DispatchKey::Meta));
  }
  for (const char* name : {"fusedops::clear_fold_cache", "fusedops::fold_cache_stats",
                           "fusedops::version"}) {
    EXPECT_TRUE(c10::Dispatcher::singleton().findSchema({name, ""}).has_value()) << name;
  }
}

// The library reports the release in the VERSION file (the one version source), read here as
// text so that a stale build or a second hard-coded copy cannot pass.
TEST(Api, Version) {
  std::ifstream file(FUSEDOPS_VERSION_FILE);
  ASSERT_TRUE(file) << "cannot read " << FUSEDOPS_VERSION_FILE;
  std::string release;
  file >> release;
  ASSERT_FALSE(release.empty());
  EXPECT_EQ(std::string(fusedops::version()), release);
}

TEST(Api, ClearFoldCacheKeepsResultsRight) {
  at::manual_seed(11);
  const at::Tensor x = at::randn({8, 40}, at::kDouble);
  const at::Tensor w = at::randn({30, 40}, at::kDouble);
  const at::Tensor b = at::randn({30}, at::kDouble);
  const at::Tensor first = fusedops::matmul_sum_max_avgpool_logsumexp_logsumexp(x, w, b);
  fusedops::clear_fold_cache();
  const at::Tensor second = fusedops::matmul_sum_max_avgpool_logsumexp_logsumexp(x, w, b);
  EXPECT_TRUE(AllClose(second, first, {0, 0}));
  EXPECT_TRUE(AllClose(second, reference18(x, w, b), tolerance_for(at::kDouble)));
}

TEST(Api, FoldedWeightsFollowInPlaceChanges) {
  at::manual_seed(12);
  const at::Tensor x = at::randn({8, 40}, at::kDouble);
  at::Tensor w = at::randn({30, 40}, at::kDouble);
  at::Tensor b = at::randn({30}, at::kDouble);
  for (int step = 0; step < 3; ++step) {
    SCOPED_TRACE(step);
    EXPECT_TRUE(AllClose(fusedops::matmul_avgpool_gelu_scale_max(x, w, b, 4, 2.0),
                         reference98(x, w, b, 4, 2.0), tolerance_for(at::kDouble)));
    EXPECT_TRUE(AllClose(fusedops::matmul_sum_max_avgpool_logsumexp_logsumexp(x, w, b),
                         reference18(x, w, b), tolerance_for(at::kDouble)));
    w.mul_(-1.5);  // bumps the version counter: the next call must refold
    b.add_(0.5);
  }
}

// ---- fold helpers against a direct computation --------------------------------------------

struct FoldCase {
  int64_t out;
  int64_t in;
  int64_t k;
};

TEST(FoldHelpers, AvgpoolFoldLinearMatchesAvgPool1d) {
  at::manual_seed(13);
  for (at::ScalarType dtype : {at::kDouble, at::kFloat}) {
    for (FoldCase c : {FoldCase{1000, 1023, 7}, FoldCase{1023, 64, 16}, FoldCase{1000, 33, 3},
                       FoldCase{50, 17, 1}, FoldCase{50, 17, 50}, FoldCase{8, 5, 3}}) {
      SCOPED_TRACE(DtypeName(dtype) + " out=" + std::to_string(c.out) +
                   " in=" + std::to_string(c.in) + " k=" + std::to_string(c.k));
      const at::Tensor w = at::randn({c.out, c.in}, dtype);
      const at::Tensor b = at::randn({c.out}, dtype);
      auto [pooled_w, pooled_b] = fusedops::avgpool_fold_linear(w, b, c.k);
      // AvgPool1d along the out dimension (floor: the last out % k rows are dropped).
      const at::Tensor expected_w =
          at::avg_pool1d(w.to(at::kDouble).t().unsqueeze(0), {c.k}).squeeze(0).t();
      const at::Tensor expected_b =
          at::avg_pool1d(b.to(at::kDouble).view({1, 1, -1}), {c.k}).view({-1});
      const Tolerance tol = dtype == at::kDouble ? Tolerance{/*atol=*/1e-14, /*rtol=*/1e-12}
                                                  : Tolerance{/*atol=*/1e-6, /*rtol=*/1e-5};
      EXPECT_TRUE(AllClose(pooled_w, expected_w.to(dtype), tol));
      EXPECT_TRUE(AllClose(pooled_b, expected_b.to(dtype), tol));
    }
  }
}

TEST(FoldHelpers, SumFoldLinearMatchesColumnSums) {
  at::manual_seed(14);
  for (at::ScalarType dtype : {at::kDouble, at::kFloat}) {
    for (auto [out, in] : {std::pair<int64_t, int64_t>{1000, 1023}, {1023, 1000}, {8192, 3},
                           {1, 1}, {5, 17}}) {
      SCOPED_TRACE(DtypeName(dtype) + " out=" + std::to_string(out) + " in=" + std::to_string(in));
      const at::Tensor w = at::randn({out, in}, dtype);
      const at::Tensor b = at::randn({out}, dtype);
      auto [column_sums, bias_sum] = fusedops::sum_fold_linear(w, b);
      ASSERT_EQ(column_sums.sizes(), at::IntArrayRef({in}));
      ASSERT_EQ(bias_sum.dim(), 0);
      // float32: a sum of `out` terms may round a few times; double is near exact.
      const double atol = dtype == at::kDouble ? 1e-11 : 1e-4;
      EXPECT_TRUE(AllClose(column_sums, w.to(at::kDouble).sum(0).to(dtype), {1e-6, atol}));
      EXPECT_TRUE(AllClose(bias_sum, b.to(at::kDouble).sum().to(dtype), {1e-6, atol}));
    }
  }
}

}  // namespace
}  // namespace fusedops::testing
