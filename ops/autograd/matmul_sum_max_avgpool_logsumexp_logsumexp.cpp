// Autograd for model 18 (Matmul_Sum_Max_AvgPool_LogSumExp_LogSumExp) and its fold helper.
//
// matmul_sum_max_avgpool_logsumexp_logsumexp saves x, weight and bias: backward recomputes the
// reference chain linear -> sum(dim=1) -> max -> mean -> logsumexp -> logsumexp
// (autograd/backward_by_recompute.h). The tail acts on a size-1 dim and its gradient is the
// identity for a finite sum; it is recomputed anyway (on (batch, 1) tensors: free) so that a
// row whose sum is +-inf or NaN gets the reference's NaN gradient from logsumexp.
//
// sum_fold_linear saves weight and bias: it is linear in them (column sums, bias sum).
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

class MatmulSumMaxAvgpoolLogsumexpLogsumexpFunction
    : public torch::autograd::Function<MatmulSumMaxAvgpoolLogsumexpLogsumexpFunction> {
 public:
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& weight,
                            const at::Tensor& bias, bool cache_folds,
                            c10::string_view numerics) {
    autograd::keep_linear_inputs(ctx, x, weight, bias);
    at::AutoDispatchBelowADInplaceOrView below_autograd;
    return fusedops::matmul_sum_max_avgpool_logsumexp_logsumexp(x, weight, bias, cache_folds,
                                                                 numerics);
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    const variable_list saved = autograd::kept_linear_inputs(ctx);
    BackwardByRecompute recompute(ctx);
    const auto [x, weight, bias] = recompute.inputs<3>(saved);
    // The reference's forward, op for op (Model18 in models/fusedops/reference.py).
    at::Tensor out = at::linear(x, weight, bias).sum(1, /*keepdim=*/true);
    out = std::get<0>(out.max(1, /*keepdim=*/true));
    out = out.mean(1, /*keepdim=*/true);
    out = out.logsumexp(1, /*keepdim=*/true);
    out = out.logsumexp(1, /*keepdim=*/true);
    variable_list grads = recompute.gradients({out}, grad_outputs);
    grads.emplace_back();  // cache_folds
    grads.emplace_back();  // numerics
    return grads;
  }
};

class SumFoldLinearFunction : public torch::autograd::Function<SumFoldLinearFunction> {
 public:
  static variable_list forward(AutogradContext* ctx, const at::Tensor& weight,
                               const at::Tensor& bias) {
    ctx->save_for_backward({weight, bias});
    at::AutoDispatchBelowADInplaceOrView below_autograd;
    auto [column_sums, bias_sum] = fusedops::sum_fold_linear(weight, bias);
    return {column_sums, bias_sum};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    const variable_list saved = ctx->get_saved_variables();
    BackwardByRecompute recompute(ctx);
    const auto [weight, bias] = recompute.inputs<2>(saved);
    return recompute.gradients({weight.sum(0), bias.sum()}, grad_outputs);
  }
};

at::Tensor matmul_sum_max_avgpool_logsumexp_logsumexp_autograd(const at::Tensor& x,
                                                               const at::Tensor& weight,
                                                               const at::Tensor& bias,
                                                               std::optional<bool> cache_folds,
                                                               c10::string_view numerics) {
  if (!autograd::needs_autograd({x, weight, bias})) {
    at::AutoDispatchBelowADInplaceOrView below_autograd;
    return fusedops::matmul_sum_max_avgpool_logsumexp_logsumexp(x, weight, bias, cache_folds,
                                                                 numerics);
  }
  // Checked here first (see RecordedCall).
  checks::matmul_sum_max_avgpool_logsumexp_logsumexp(x, weight, bias);
  const autograd::RecordedCall call(cache_folds, {weight, bias});
  return MatmulSumMaxAvgpoolLogsumexpLogsumexpFunction::apply(x, weight, bias,
                                                               call.cache_folds(), numerics);
}

std::tuple<at::Tensor, at::Tensor> sum_fold_linear_autograd(const at::Tensor& weight,
                                                            const at::Tensor& bias) {
  checks::sum_fold_linear(weight, bias);
  const variable_list folded = SumFoldLinearFunction::apply(weight, bias);
  return {folded[0], folded[1]};
}

}  // namespace

TORCH_LIBRARY_IMPL(fusedops, Autograd, m) {
  m.impl("matmul_sum_max_avgpool_logsumexp_logsumexp",
         &matmul_sum_max_avgpool_logsumexp_logsumexp_autograd);
  m.impl("sum_fold_linear", &sum_fold_linear_autograd);
}

}  // namespace fusedops
