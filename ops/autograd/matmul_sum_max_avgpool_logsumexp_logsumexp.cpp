// Autograd for model 18 (Matmul_Sum_Max_AvgPool_LogSumExp_LogSumExp) and its fold helper.
//
// matmul_sum_max_avgpool_logsumexp_logsumexp saves x, weight, bias and its output. Its backward
// is the model's own algebra (issue 40): out = x . c + s with c = colsum(W) and s = sum(b), and
// the tail (max, mean, two logsumexps over a size-1 dim) has logsumexp's gradient
// exp(out - out), as the reference's: 1 on a finite row, NaN on another (exp(inf - inf)).
// With g that gradient (batch,): dL/dx = g c^T, dL/dW[j, :] = x^T g for every j (W's gradient
// has rank one: one GEMV, broadcast), dL/db[j] = sum(g) for every j. No GEMM and no
// (batch, out_features) tensor. A double backward (create_graph) recomputes the reference's
// chain (autograd/backward_by_recompute.h) and differentiates that.
//
// sum_fold_linear saves weight and bias: it is linear in them (column sums, bias sum).
#include <ATen/ATen.h>
#include <ATen/OpMathType.h>
#include <c10/core/impl/LocalDispatchKeySet.h>
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
    at::Tensor out;
    {
      at::AutoDispatchBelowADInplaceOrView below_autograd;
      out = fusedops::matmul_sum_max_avgpool_logsumexp_logsumexp(x, weight, bias, cache_folds,
                                                                  numerics);
    }
    // The output, not a mask of its finite rows: the backward's factor is a function of it,
    // and a mask cost the forward of every training step four more kernels.
    autograd::keep_linear_inputs(ctx, x, weight, bias, out);
    return out;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    if (at::GradMode::is_enabled()) return by_recompute(ctx, grad_outputs);
    const variable_list saved = autograd::kept_linear_inputs(ctx);
    const at::Tensor &x = saved[0], &weight = saved[1], &bias = saved[2];
    // In the forward's dtypes (autograd/backward_by_recompute.h: the same rule).
    const c10::impl::ExcludeDispatchKeyGuard no_autocast(c10::autocast_dispatch_keyset);
    const at::ScalarType acc = at::toOpMathType(x.scalar_type());
    // logsumexp's gradient exp(out - out): exactly 1 on a finite row, NaN on an infinite or
    // NaN one.
    const at::Tensor out = saved[3].reshape({-1});
    const at::Tensor g = grad_outputs[0].reshape({-1}).to(acc) * (out - out).exp();
    variable_list grads(5);
    if (ctx->needs_input_grad(0)) {
      const at::Tensor column_sums = at::sum(weight, {0}, /*keepdim=*/false, acc);
      grads[0] = at::outer(g, column_sums).to(x.scalar_type());
    }
    // An inference tensor weight (a model built under inference mode) gets none, as in the
    // reference, whose Linear reaches it through a view autograd cannot track (W^T).
    if (ctx->needs_input_grad(1) && !weight.is_inference()) {
      const at::Tensor row = at::mv(x.to(acc).t(), g).to(weight.scalar_type());
      grads[1] = row.unsqueeze(0).expand_symint(weight.sym_sizes());
    }
    if (ctx->needs_input_grad(2)) {
      grads[2] = g.sum().to(bias.scalar_type()).expand_symint(bias.sym_sizes());
    }
    return grads;  // and none for cache_folds, numerics
  }

 private:
  static variable_list by_recompute(AutogradContext* ctx, const variable_list& grad_outputs) {
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
