// Autograd from C++: the Autograd kernels (ops/autograd/) sit in the dispatcher, so gradients
// flow through the public API exactly as through torch.ops.fusedops in Python. Expected
// gradients come from the ATen reference chains in reference.h.
#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <gtest/gtest.h>
#include <torch/autograd.h>

#include <fusedops/fusedops.h>

#include <functional>
#include <vector>

#include "reference.h"

namespace fusedops::testing {
namespace {

using torch::autograd::variable_list;

constexpr Tolerance kFloat64GradTolerance{/*atol=*/1e-10, /*rtol=*/1e-9};

at::Tensor leaf(std::vector<int64_t> shape, double offset = 0.0) {
  return (at::randn(shape, at::kDouble) + offset).requires_grad_(true);
}

// The gradients of sum(f(inputs) * grad_out) w.r.t. the inputs.
variable_list gradients(const std::function<at::Tensor()>& f, const variable_list& inputs,
                        at::Tensor& grad_out) {
  const at::Tensor out = f();
  if (!grad_out.defined()) grad_out = at::randn_like(out);
  return torch::autograd::grad({out}, inputs, {grad_out});
}

void ExpectSameGradients(const std::function<at::Tensor()>& fused,
                         const std::function<at::Tensor()>& reference,
                         const variable_list& inputs) {
  at::Tensor grad_out;
  const variable_list expected = gradients(reference, inputs, grad_out);
  const variable_list actual = gradients(fused, inputs, grad_out);
  ASSERT_EQ(actual.size(), expected.size());
  for (size_t i = 0; i < actual.size(); ++i) {
    EXPECT_TRUE(AllClose(actual[i], expected[i], kFloat64GradTolerance)) << "input " << i;
  }
}

TEST(Autograd, EveryDifferentiableOperatorHasAnAutogradKernel) {
  for (const char* name :
       {"fusedops::matmul_avgpool_gelu_scale_max",
        "fusedops::matmul_sum_max_avgpool_logsumexp_logsumexp", "fusedops::gemm_scale_batchnorm",
        "fusedops::matmul_groupnorm_leakyrelu_sum", "fusedops::avgpool_fold_linear",
        "fusedops::sum_fold_linear", "fusedops::gemm_nt",
        "fusedops::groupnorm_leakyrelu_sum_backward",
        "fusedops::avgpool_gelu_scale_max_backward"}) {
    auto handle = c10::Dispatcher::singleton().findSchema({name, ""});
    ASSERT_TRUE(handle.has_value()) << name;
    EXPECT_TRUE(handle->hasKernelForDispatchKey(c10::DispatchKey::Autograd)) << name;
  }
}

TEST(Autograd, MatmulAvgpoolGeluScaleMax) {
  at::manual_seed(1);
  const at::Tensor x = leaf({7, 13}), w = leaf({21, 13}), b = leaf({21});
  for (double scale : {2.0, -0.5}) {
    ExpectSameGradients([&] { return matmul_avgpool_gelu_scale_max(x, w, b, 4, scale); },
                        [&] { return reference98(x, w, b, 4, scale); }, {x, w, b});
  }
}

TEST(Autograd, MatmulSumMaxAvgpoolLogsumexpLogsumexp) {
  at::manual_seed(2);
  const at::Tensor x = leaf({7, 13}), w = leaf({21, 13}), b = leaf({21});
  ExpectSameGradients([&] { return matmul_sum_max_avgpool_logsumexp_logsumexp(x, w, b); },
                      [&] { return reference18(x, w, b); }, {x, w, b});
}

TEST(Autograd, GemmScaleBatchnormTrainAndEval) {
  at::manual_seed(3);
  const at::Tensor x = leaf({7, 13}), w = leaf({21, 13}), b = leaf({21}), scale = leaf({21});
  const at::Tensor gamma = leaf({21}, 1.0), beta = leaf({21});
  const at::Tensor mean0 = at::randn({21}, at::kDouble), var0 = at::rand({21}, at::kDouble) + 0.5;
  for (bool training : {true, false}) {
    SCOPED_TRACE(training ? "train" : "eval");
    // each side updates its own copy of the statistics, from the same start
    at::Tensor mean = mean0.clone(), var = var0.clone(), count = at::zeros({}, at::kLong);
    at::Tensor ref_mean = mean0.clone(), ref_var = var0.clone();
    at::Tensor ref_count = at::zeros({}, at::kLong);
    ExpectSameGradients(
        [&] {
          return gemm_scale_batchnorm(x, w, b, scale, gamma, beta, mean, var, count, training,
                                      0.1, 1e-5);
        },
        [&] {
          return reference39(x, w, b, scale, gamma, beta, ref_mean, ref_var, ref_count,
                             training, 0.1, 1e-5);
        },
        {x, w, b, scale, gamma, beta});
    // the forward moved the statistics once; the backward left them alone
    EXPECT_TRUE(AllClose(mean, ref_mean, kFloat64GradTolerance));
    EXPECT_TRUE(AllClose(var, ref_var, kFloat64GradTolerance));
    EXPECT_EQ(count.item<int64_t>(), ref_count.item<int64_t>());
  }
}

TEST(Autograd, MatmulGroupnormLeakyreluSum) {
  at::manual_seed(4);
  const at::Tensor x = leaf({7, 13}), w = leaf({21, 13}), b = leaf({21});
  const at::Tensor gamma = leaf({21}, 1.0), beta = leaf({21});
  ExpectSameGradients(
      [&] { return matmul_groupnorm_leakyrelu_sum(x, w, b, 3, gamma, beta, 1e-5, 0.1); },
      [&] { return reference62(x, w, b, 3, gamma, beta, 1e-5, 0.1); },
      {x, w, b, gamma, beta});
}

TEST(Autograd, OnlyTheInputsThatRequireGradGetAGraph) {
  at::manual_seed(5);
  const at::Tensor x = at::randn({7, 13}, at::kDouble);
  const at::Tensor w = at::randn({21, 13}, at::kDouble), b = at::randn({21}, at::kDouble);
  EXPECT_FALSE(matmul_sum_max_avgpool_logsumexp_logsumexp(x, w, b).requires_grad());
  const at::Tensor w_leaf = w.clone().requires_grad_(true);
  {
    at::NoGradGuard no_grad;
    EXPECT_FALSE(matmul_sum_max_avgpool_logsumexp_logsumexp(x, w_leaf, b).requires_grad());
  }
  const at::Tensor out = matmul_sum_max_avgpool_logsumexp_logsumexp(x, w_leaf, b);
  ASSERT_TRUE(out.requires_grad());
  const at::Tensor expected = reference18(x, w_leaf, b);
  const at::Tensor grad_out = at::randn_like(out);
  EXPECT_TRUE(AllClose(torch::autograd::grad({out}, {w_leaf}, {grad_out})[0],
                       torch::autograd::grad({expected}, {w_leaf}, {grad_out})[0],
                       kFloat64GradTolerance));
}

}  // namespace
}  // namespace fusedops::testing
