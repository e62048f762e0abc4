// Autograd for model 62 (Matmul_GroupNorm_LeakyReLU_Sum).
//
// Saves x, weight, bias, gn_weight and gn_bias (plus num_groups, eps, negative_slope):
// backward recomputes the reference chain linear -> group_norm -> leaky_relu -> v + v
// (autograd/backward_by_recompute.h): the group statistics' terms of the gradient are
// GroupNorm's own.
#include <ATen/ATen.h>
#include <torch/autograd.h>
#include <torch/library.h>

#include <optional>

#include "common/checks.h"
#include "autograd/backward_by_recompute.h"
#include "fusedops/fusedops.h"

namespace fusedops {
namespace {

using autograd::BackwardByRecompute;
using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

class MatmulGroupnormLeakyreluSumFunction
    : public torch::autograd::Function<MatmulGroupnormLeakyreluSumFunction> {
 public:
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& weight,
                            const at::Tensor& bias, int64_t num_groups,
                            const at::Tensor& gn_weight, const at::Tensor& gn_bias, double eps,
                            double negative_slope, bool cache_folds,
                            c10::string_view numerics) {
    ctx->save_for_backward({x, weight, bias, gn_weight, gn_bias});
    ctx->saved_data["num_groups"] = num_groups;
    ctx->saved_data["eps"] = eps;
    ctx->saved_data["negative_slope"] = negative_slope;
    at::AutoDispatchBelowADInplaceOrView below_autograd;
    return fusedops::matmul_groupnorm_leakyrelu_sum(x, weight, bias, num_groups, gn_weight,
                                                    gn_bias, eps, negative_slope, cache_folds,
                                                    numerics);
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    const variable_list saved = ctx->get_saved_variables();
    const int64_t num_groups = ctx->saved_data["num_groups"].toInt();
    const double eps = ctx->saved_data["eps"].toDouble();
    const double negative_slope = ctx->saved_data["negative_slope"].toDouble();

    BackwardByRecompute recompute(ctx);
    const auto [x, weight, bias, gn_weight, gn_bias] = recompute.inputs<5>(saved);
    // The reference's forward, op for op (Model62 in models/fusedops/reference.py). In the
    // autocast form group_norm ran in float32 (an autocast float32 op) on the widened output.
    const at::Tensor y =
        autograd::reference_linear(x, weight, bias).to(gn_weight.scalar_type());
    const bool cudnn_enabled = at::globalContext().userEnabledCuDNN();  // as F.group_norm
    const at::Tensor normalized = at::group_norm(y, num_groups, gn_weight, gn_bias, eps,
                                                 cudnn_enabled);
    const at::Tensor activated = at::leaky_relu(normalized, negative_slope);
    const at::Tensor out = activated + activated;

    const variable_list grads = recompute.gradients({out}, grad_outputs);
    // x, weight, bias, num_groups, gn_weight, gn_bias, eps, negative_slope, cache_folds,
    // numerics.
    return {grads[0], grads[1],     grads[2],     at::Tensor(), grads[3],
            grads[4], at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

at::Tensor matmul_groupnorm_leakyrelu_sum_autograd(const at::Tensor& x, const at::Tensor& weight,
                                                   const at::Tensor& bias, int64_t num_groups,
                                                   const at::Tensor& gn_weight,
                                                   const at::Tensor& gn_bias, double eps,
                                                   double negative_slope, std::optional<bool> cache_folds,
                                                   c10::string_view numerics) {
  if (!autograd::needs_autograd({x, weight, bias, gn_weight, gn_bias})) {
    at::AutoDispatchBelowADInplaceOrView below_autograd;
    return fusedops::matmul_groupnorm_leakyrelu_sum(x, weight, bias, num_groups, gn_weight,
                                                    gn_bias, eps, negative_slope, cache_folds,
                                                    numerics);
  }
  // Checked here first (see RecordedCall).
  checks::matmul_groupnorm_leakyrelu_sum(x, weight, bias, num_groups, gn_weight, gn_bias);
  const autograd::RecordedCall call(cache_folds, {weight, bias, gn_weight, gn_bias});
  return MatmulGroupnormLeakyreluSumFunction::apply(x, weight, bias, num_groups, gn_weight,
                                                    gn_bias, eps, negative_slope,
                                                    call.cache_folds(), numerics);
}

}  // namespace

TORCH_LIBRARY_IMPL(fusedops, Autograd, m) {
  m.impl("matmul_groupnorm_leakyrelu_sum", &matmul_groupnorm_leakyrelu_sum_autograd);
}

}  // namespace fusedops
