// Bad inputs throw c10::Error whose message names the operator, the tensor, what was expected
// and what was given (ops/common/checks.cpp).
#include <ATen/ATen.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fusedops/fusedops.h>

#include <functional>
#include <string>
#include <vector>

#include "reference.h"

namespace fusedops::testing {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

// Valid arguments for every operator: x (6, 12), weight (20, 12), bias (20,), float32.
struct Args {
  at::Tensor x = at::randn({6, 12});
  at::Tensor weight = at::randn({20, 12});
  at::Tensor bias = at::randn({20});
  int64_t pool_kernel_size = 3;
  at::Tensor scale = at::randn({20});
  at::Tensor bn_weight = at::ones({20});
  at::Tensor bn_bias = at::zeros({20});
  at::Tensor running_mean = at::full({20}, 0.25);
  at::Tensor running_var = at::full({20}, 1.5);
  at::Tensor num_batches_tracked = at::full({}, 7, at::kLong);
  bool training = true;
  int64_t num_groups = 4;
  at::Tensor gn_weight = at::ones({20});
  at::Tensor gn_bias = at::zeros({20});
};

at::Tensor Call98(Args& a) {
  return fusedops::matmul_avgpool_gelu_scale_max(a.x, a.weight, a.bias, a.pool_kernel_size, 2.0);
}
at::Tensor Call18(Args& a) {
  return fusedops::matmul_sum_max_avgpool_logsumexp_logsumexp(a.x, a.weight, a.bias);
}
at::Tensor Call39(Args& a) {
  return fusedops::gemm_scale_batchnorm(a.x, a.weight, a.bias, a.scale, a.bn_weight, a.bn_bias,
                                        a.running_mean, a.running_var, a.num_batches_tracked,
                                        a.training, 0.1, 1e-5);
}
at::Tensor Call62(Args& a) {
  return fusedops::matmul_groupnorm_leakyrelu_sum(a.x, a.weight, a.bias, a.num_groups,
                                                  a.gn_weight, a.gn_bias, 1e-5, 0.01);
}

struct Op {
  const char* name;
  std::function<at::Tensor(Args&)> call;
};
const Op kModelOps[] = {{"matmul_avgpool_gelu_scale_max", Call98},
                        {"matmul_sum_max_avgpool_logsumexp_logsumexp", Call18},
                        {"gemm_scale_batchnorm", Call39},
                        {"matmul_groupnorm_leakyrelu_sum", Call62}};

struct LinearCase {
  const char* what;
  std::function<void(Args&)> change;
  std::vector<std::string> message;  // substrings, all required
};

const std::vector<LinearCase>& LinearCases() {
  static const std::vector<LinearCase> cases = {
      {"x 1-D", [](Args& a) { a.x = a.x[0]; },
       {"x must be a 2-D tensor (batch, in_features), got a 1-D tensor of shape [12]"}},
      {"x 3-D", [](Args& a) { a.x = a.x.unsqueeze(0); },
       {"x must be a 2-D tensor (batch, in_features), got a 3-D tensor of shape [1, 6, 12]"}},
      {"wrong in_features", [](Args& a) { a.x = a.x.narrow(1, 0, 11); },
       {"x must have 12 columns (in_features of weight [20, 12]), got 11"}},
      {"x float64, weights float32", [](Args& a) { a.x = a.x.to(at::kDouble); },
       {"weight must have the same dtype as x (Double), got Float"}},
      {"x int64", [](Args& a) { a.x = a.x.to(at::kLong); },
       {"x must be a floating-point tensor (float32, float64, float16 or bfloat16), got Long"}},
      {"weight 1-D", [](Args& a) { a.weight = a.weight[0]; },
       {"weight must be a 2-D tensor (out_features, in_features), got a 1-D tensor"}},
      {"bias wrong size", [](Args& a) { a.bias = a.bias.narrow(0, 0, 19); },
       {"bias must have shape [20] (out_features), got shape [19]"}},
      {"bias float64", [](Args& a) { a.bias = a.bias.to(at::kDouble); },
       {"bias must have the same dtype as x (Float), got Double"}},
      {"undefined bias", [](Args& a) { a.bias = at::Tensor(); },
       {"bias must be a defined tensor"}},
  };
  return cases;
}

TEST(Errors, EveryModelOpChecksItsLinear) {
  at::manual_seed(31);
  for (const Op& op : kModelOps) {
    {
      Args valid;
      EXPECT_NO_THROW(op.call(valid)) << op.name;
    }
    for (const LinearCase& c : LinearCases()) {
      SCOPED_TRACE(std::string(op.name) + ": " + c.what);
      Args a;
      c.change(a);
      const std::string message = ErrorMessage([&] { op.call(a); });
      EXPECT_THAT(message, HasSubstr(std::string(op.name) + ": "));
      for (const std::string& part : c.message) EXPECT_THAT(message, HasSubstr(part));
    }
  }
}

struct OpCase {
  const char* what;
  std::function<at::Tensor(Args&)> call;
  std::function<void(Args&)> change;
  std::vector<std::string> message;
};

TEST(Errors, OperatorSpecificArguments) {
  at::manual_seed(32);
  const std::vector<OpCase> cases = {
      {"pool larger than out", Call98, [](Args& a) { a.pool_kernel_size = 21; },
       {"matmul_avgpool_gelu_scale_max: out_features must be at least pool_kernel_size",
        "got out_features=20, pool_kernel_size=21"}},
      {"pool zero", Call98, [](Args& a) { a.pool_kernel_size = 0; },
       {"pool_kernel_size must be greater than zero, got 0"}},
      {"pool negative", Call98, [](Args& a) { a.pool_kernel_size = -2; },
       {"pool_kernel_size must be greater than zero, got -2"}},
      {"scale wrong size", Call39, [](Args& a) { a.scale = at::randn({21}); },
       {"gemm_scale_batchnorm: scale must broadcast to (batch, out_features) = (6, 20), got "
        "shape [21]"}},
      {"scale wrong rows", Call39, [](Args& a) { a.scale = at::randn({2, 20}); },
       {"scale must broadcast to (batch, out_features) = (6, 20), got shape [2, 20]"}},
      {"scale 3-D", Call39, [](Args& a) { a.scale = at::randn({1, 1, 20}); },
       {"scale must broadcast to (batch, out_features) = (6, 20), got shape [1, 1, 20]"}},
      {"scale float64", Call39, [](Args& a) { a.scale = a.scale.to(at::kDouble); },
       {"scale must have the same dtype as x (Float), got Double"}},
      {"running_mean wrong size", Call39, [](Args& a) { a.running_mean = at::zeros({19}); },
       {"running_mean must have shape [20] (out_features), got shape [19]"}},
      {"running_var float64", Call39,
       [](Args& a) { a.running_var = a.running_var.to(at::kDouble); },
       {"running_var must have the same dtype as x (Float), got Double"}},
      {"bn_weight wrong size", Call39, [](Args& a) { a.bn_weight = at::ones({21}); },
       {"bn_weight must have shape [20] (out_features), got shape [21]"}},
      {"num_batches_tracked float", Call39,
       [](Args& a) { a.num_batches_tracked = at::zeros({}); },
       {"num_batches_tracked must be a 0-D int64 tensor"}},
      {"num_batches_tracked 1-D", Call39,
       [](Args& a) { a.num_batches_tracked = at::zeros({1}, at::kLong); },
       {"num_batches_tracked must be a 0-D int64 tensor", "of shape [1]"}},
      {"batch 1 in training", Call39, [](Args& a) { a.x = a.x.narrow(0, 0, 1); },
       {"gemm_scale_batchnorm: x must have more than 1 row in training mode",
        "got batch size 1"}},
      {"num_groups not dividing", Call62, [](Args& a) { a.num_groups = 3; },
       {"matmul_groupnorm_leakyrelu_sum: num_groups must divide hidden_size",
        "got num_groups=3, hidden_size=20"}},
      {"num_groups zero", Call62, [](Args& a) { a.num_groups = 0; },
       {"num_groups must be greater than zero, got 0"}},
      {"gn_weight wrong size", Call62, [](Args& a) { a.gn_weight = at::ones({19}); },
       {"gn_weight must have shape [20] (hidden_size), got shape [19]"}},
      {"gn_bias float64", Call62, [](Args& a) { a.gn_bias = a.gn_bias.to(at::kDouble); },
       {"gn_bias must have the same dtype as x (Float), got Double"}},
  };
  for (const OpCase& c : cases) {
    SCOPED_TRACE(c.what);
    Args a;
    c.change(a);
    const at::Tensor mean_before = a.running_mean.clone();
    const at::Tensor var_before = a.running_var.clone();
    const std::string message = ErrorMessage([&] { c.call(a); });
    for (const std::string& part : c.message) EXPECT_THAT(message, HasSubstr(part));
    // a rejected call leaves the running statistics alone
    if (a.running_mean.sizes() == mean_before.sizes() &&
        a.running_mean.scalar_type() == mean_before.scalar_type()) {
      EXPECT_TRUE(a.running_mean.equal(mean_before));
    }
    if (a.running_var.sizes() == var_before.sizes() &&
        a.running_var.scalar_type() == var_before.scalar_type()) {
      EXPECT_TRUE(a.running_var.equal(var_before));
    }
  }
}

TEST(Errors, BatchOneInEvalIsFine) {
  at::manual_seed(33);
  Args a;
  a.x = a.x.narrow(0, 0, 1);
  a.training = false;
  EXPECT_NO_THROW(Call39(a));
}

TEST(Errors, FoldHelpers) {
  at::manual_seed(34);
  const at::Tensor w = at::randn({20, 12});
  const at::Tensor b = at::randn({20});
  EXPECT_THAT(ErrorMessage([&] { fusedops::avgpool_fold_linear(w[0], b, 3); }),
              HasSubstr("avgpool_fold_linear: weight must be a 2-D tensor (out_features, "
                        "in_features), got a 1-D tensor"));
  EXPECT_THAT(ErrorMessage([&] { fusedops::avgpool_fold_linear(w, b, 0); }),
              HasSubstr("avgpool_fold_linear: pool_kernel_size must be greater than zero, got 0"));
  EXPECT_THAT(ErrorMessage([&] { fusedops::avgpool_fold_linear(w, b, 21); }),
              HasSubstr("out_features must be at least pool_kernel_size, got out_features=20, "
                        "pool_kernel_size=21"));
  EXPECT_THAT(ErrorMessage([&] { fusedops::avgpool_fold_linear(w.to(at::kInt), b, 3); }),
              HasSubstr("weight must be a floating-point tensor"));
  EXPECT_THAT(ErrorMessage([&] { fusedops::sum_fold_linear(w, b.narrow(0, 0, 19)); }),
              HasSubstr("sum_fold_linear: bias must have shape [20] (out_features), got shape "
                        "[19]"));
  EXPECT_THAT(ErrorMessage([&] { fusedops::sum_fold_linear(w, b.to(at::kDouble)); }),
              HasSubstr("bias must have the same dtype"));
}

}  // namespace
}  // namespace fusedops::testing
