// Autograd for model 62 (Matmul_GroupNorm_LeakyReLU_Sum).
//
// Saves x, weight, bias, gn_weight and gn_bias (plus num_groups, eps, negative_slope), and aside
// the forward's y where kept. The backward (issue 40) runs the reference's backward formulas
// directly (on the CPU its ops, so that the gradients are the reference's bit for bit; on CUDA
// its GEMMs on the planner's GEMM, autograd/backward_gemms.h): y = x W^T + b as the CUDA
// forward wrote it (kept, common/kept_linear.h; recomputed where a route never writes it, and
// on the CPU), then GroupNorm's, LeakyReLU's and v + v's backward in one helper operator
// (fusedops::groupnorm_leakyrelu_sum_backward: on the CPU ATen's GroupNorm and its backward, on
// CUDA one pass), then the Linear's three. Without autograd's graph over the recomputation, at
// most y, y's gradient and two per-element terms (CUDA) or GroupNorm's output and its gradient
// (CPU) live at once: no more than the reference's activations.
// In float16/bfloat16 the same, in the reference's dtypes: the Linear in x's dtype, GroupNorm
// in gn_weight's (the autocast form's float32, on the widened y, as the reference's float32
// group_norm widened it), y's gradient back in x's dtype (backward_gemms.h).
// An empty batch, a double backward (create_graph) and a half model with numerics="eager" (the
// reference's roundings) recompute the reference chain linear -> group_norm -> leaky_relu ->
// v + v under autograd (autograd/backward_by_recompute.h) and differentiate it.
#include <ATen/ATen.h>
#include <c10/core/impl/LocalDispatchKeySet.h>
#include <torch/autograd.h>
#include <torch/library.h>

#include <optional>
#include <tuple>
#include <utility>

#include "common/checks.h"
#include "autograd/backward_by_recompute.h"
#include "autograd/backward_gemms.h"
#include "common/kept_linear.h"
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
    ctx->saved_data["num_groups"] = num_groups;
    ctx->saved_data["eps"] = eps;
    ctx->saved_data["negative_slope"] = negative_slope;
    at::Tensor out;
    const KeepLinear keep;  // y, where the CUDA kernel writes it (common/kept_linear.h)
    {
      at::AutoDispatchBelowADInplaceOrView below_autograd;
      out = fusedops::matmul_groupnorm_leakyrelu_sum(x, weight, bias, num_groups, gn_weight,
                                                     gn_bias, eps, negative_slope, cache_folds,
                                                     numerics);
    }
    autograd::remember_rounding(ctx, "matmul_groupnorm_leakyrelu_sum", numerics, x);
    variable_list to_save{x, weight, bias, gn_weight, gn_bias};
    autograd::keep_linear_output(ctx, keep, x, bias, to_save);  // y aside, or last
    ctx->save_for_backward(to_save);
    return out;
  }

  // grad_outputs by reference: autograd hands the node its only handle (CppNode), and the
  // backward drops it once consumed (below).
  static variable_list backward(AutogradContext* ctx, variable_list& grad_outputs) {
    const variable_list saved = ctx->get_saved_variables();
    if (autograd::recomputes(ctx, saved[0])) return by_recompute(ctx, saved, grad_outputs);
    const int64_t num_groups = ctx->saved_data["num_groups"].toInt();
    const double eps = ctx->saved_data["eps"].toDouble();
    const double negative_slope = ctx->saved_data["negative_slope"].toDouble();
    const at::Tensor &x = saved[0], &weight = saved[1], &bias = saved[2], &gamma = saved[3],
                     &beta = saved[4];
    // In the forward's dtype (autograd/backward_by_recompute.h: the same rule).
    const c10::impl::ExcludeDispatchKeyGuard no_autocast(c10::autocast_dispatch_keyset);
    at::Tensor dy, dgamma, dbeta;
    {
      // y (taken from ctx; a fresh y + b where the kept y has no bias) and the gradient given
      // live only until y's gradient: the Linear's GEMMs below run without them, as autograd's
      // engine frees the reference's saved activations node by node (a step's peak is at W's
      // gradient).
      const at::Tensor y =
          autograd::forward_linear(ctx, saved, 5, x, weight, bias).to(gamma.scalar_type());
      std::tie(dy, dgamma, dbeta) = fusedops::groupnorm_leakyrelu_sum_backward(
          grad_outputs[0], y, gamma, beta, num_groups, eps, negative_slope);
      grad_outputs[0].reset();
    }
    // One per argument: x, weight, bias, num_groups, gn_weight, gn_bias, eps, negative_slope,
    // cache_folds, numerics. (needs_input_grad counts the tensor arguments alone.)
    variable_list grads(10);
    autograd::linear_gradients(ctx, std::move(dy), x, weight, bias, grads);
    if (ctx->needs_input_grad(3)) grads[4] = dgamma;
    if (ctx->needs_input_grad(4)) grads[5] = dbeta;
    return grads;
  }

 private:
  static variable_list by_recompute(AutogradContext* ctx, const variable_list& saved,
                                    const variable_list& grad_outputs) {
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
