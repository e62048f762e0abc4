// The operators on CUDA against the CPU composite of the reference chain (run in float64).
// Skipped when no GPU is visible at run time.
#include <ATen/ATen.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <torch/cuda.h>

#include <fusedops/fusedops.h>

#include <cmath>
#include <string>

#include "reference.h"

namespace fusedops::testing {
namespace {

class OpsCuda : public ::testing::TestWithParam<at::ScalarType> {
 protected:
  void SetUp() override {
    if (!torch::cuda::is_available()) GTEST_SKIP() << "CUDA is not available";
    at::manual_seed(777);
  }
  at::ScalarType dtype() const { return GetParam(); }
  // The float64 CPU reference of the same (rounded) values is the expected result; float32
  // gets SPEC's 1e-4 bar, float64 the tight one.
  Tolerance tol() const { return tolerance_for(dtype()); }
  at::Tensor cpu64(const at::Tensor& t) const { return t.to(at::kCPU, at::kDouble); }
  at::Tensor on_gpu(const at::Tensor& t) const { return t.to(at::kCUDA, dtype()); }
};

INSTANTIATE_TEST_SUITE_P(Dtypes, OpsCuda, ::testing::Values(at::kDouble, at::kFloat),
                         [](const auto& info) { return DtypeName(info.param); });

TEST_P(OpsCuda, AllOperatorsAgainstCpuReference) {
  for (int64_t batch : {1, 3, 257}) {
    for (auto [in, out] : {std::pair<int64_t, int64_t>{1023, 1000}, {1000, 1023}}) {
      SCOPED_TRACE(DtypeName(dtype()) + " batch=" + std::to_string(batch) +
                   " in=" + std::to_string(in) + " out=" + std::to_string(out));
      const at::Tensor x = on_gpu(at::randn({batch, in}));
      const double bound = 1.0 / std::sqrt(static_cast<double>(in));
      const at::Tensor w = on_gpu((at::rand({out, in}) * 2 - 1) * bound);
      const at::Tensor b = on_gpu((at::rand({out}) * 2 - 1) * bound);
      const at::Tensor x64 = cpu64(x), w64 = cpu64(w), b64 = cpu64(b);

      const at::Tensor r98 = fusedops::matmul_avgpool_gelu_scale_max(x, w, b, 7, 2.0);
      EXPECT_TRUE(r98.is_cuda());
      EXPECT_TRUE(AllClose(cpu64(r98), reference98(x64, w64, b64, 7, 2.0), tol()));

      const at::Tensor r18 = fusedops::matmul_sum_max_avgpool_logsumexp_logsumexp(x, w, b);
      EXPECT_TRUE(AllClose(cpu64(r18), reference18(x64, w64, b64), tol()));

      const int64_t groups = out == 1000 ? 8 : 31;
      const at::Tensor gamma = on_gpu(at::randn({out})), beta = on_gpu(at::randn({out}));
      const at::Tensor r62 =
          fusedops::matmul_groupnorm_leakyrelu_sum(x, w, b, groups, gamma, beta, 1e-5, 0.01);
      EXPECT_TRUE(AllClose(cpu64(r62),
                           reference62(x64, w64, b64, groups, cpu64(gamma), cpu64(beta), 1e-5,
                                       0.01),
                           tol()));

      for (bool training : {true, false}) {
        if (training && batch == 1) continue;
        SCOPED_TRACE(training ? "train" : "eval");
        const at::Tensor scale = on_gpu(at::randn({out}));
        at::Tensor mean = on_gpu(at::full({out}, 0.25)), var = on_gpu(at::full({out}, 1.5));
        at::Tensor count = at::full({}, 7, at::TensorOptions(at::kLong).device(at::kCUDA));
        at::Tensor mean64 = cpu64(mean), var64 = cpu64(var), count_cpu = count.cpu();
        const at::Tensor r39 = fusedops::gemm_scale_batchnorm(
            x, w, b, scale, gamma, beta, mean, var, count, training, 0.1, 1e-5);
        const at::Tensor e39 = reference39(x64, w64, b64, cpu64(scale), cpu64(gamma),
                                           cpu64(beta), mean64, var64, count_cpu, training, 0.1,
                                           1e-5);
        EXPECT_TRUE(AllClose(cpu64(r39), e39, tol()));
        const Tolerance stats =
            dtype() == at::kDouble ? Tolerance{/*atol=*/1e-12, /*rtol=*/1e-10}
                                    : Tolerance{/*atol=*/1e-6, /*rtol=*/1e-4};
        EXPECT_TRUE(AllClose(cpu64(mean), mean64, stats));
        EXPECT_TRUE(AllClose(cpu64(var), var64, stats));
        EXPECT_EQ(count.item<int64_t>(), count_cpu.item<int64_t>());
      }
    }
  }
}

TEST_P(OpsCuda, FoldHelpersAgainstCpu) {
  const at::Tensor w = on_gpu(at::randn({1000, 1023}));
  const at::Tensor b = on_gpu(at::randn({1000}));
  auto [pw, pb] = fusedops::avgpool_fold_linear(w, b, 7);
  const at::Tensor expected_w = at::avg_pool1d(cpu64(w).t().unsqueeze(0), {7}).squeeze(0).t();
  const Tolerance t = dtype() == at::kDouble ? Tolerance{/*atol=*/1e-13, /*rtol=*/1e-12}
                                               : Tolerance{/*atol=*/1e-6, /*rtol=*/1e-5};
  EXPECT_TRUE(AllClose(cpu64(pw), expected_w, t));
  EXPECT_TRUE(AllClose(cpu64(pb), at::avg_pool1d(cpu64(b).view({1, 1, -1}), {7}).view({-1}), t));
  auto [colsum, bsum] = fusedops::sum_fold_linear(w, b);
  const Tolerance s = dtype() == at::kDouble ? Tolerance{/*atol=*/1e-10, /*rtol=*/1e-10}
                                               : Tolerance{/*atol=*/1e-3, /*rtol=*/1e-5};
  EXPECT_TRUE(AllClose(cpu64(colsum), cpu64(w).sum(0), s));
  EXPECT_TRUE(AllClose(cpu64(bsum), cpu64(b).sum(), s));
}

TEST(OpsCudaErrors, DeviceMismatch) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "CUDA is not available";
  const at::Tensor x = at::randn({6, 12}, at::kCUDA);
  const at::Tensor w = at::randn({20, 12}, at::kCUDA);
  const at::Tensor b = at::randn({20});  // on the CPU
  EXPECT_THAT(ErrorMessage([&] { fusedops::matmul_avgpool_gelu_scale_max(x, w, b, 3, 2.0); }),
              ::testing::HasSubstr("bias must be on the same device as x (cuda:0), got cpu"));
  EXPECT_THAT(ErrorMessage([&] {
                fusedops::matmul_sum_max_avgpool_logsumexp_logsumexp(x.cpu(), w, b.cuda());
              }),
              ::testing::HasSubstr("weight must be on the same device as x (cpu), got cuda:0"));
}

}  // namespace
}  // namespace fusedops::testing
