// Autograd for model 98 (Matmul_AvgPool_GELU_Scale_Max) and its fold helper.
//
// matmul_avgpool_gelu_scale_max saves x, weight and bias (plus the two non-tensor arguments):
// backward recomputes the reference chain linear -> avg_pool1d -> gelu -> * scale_factor ->
// max(dim=1) (autograd/backward_by_recompute.h). The max's gradient goes to the argmax of that
// recomputed chain (the first index on a tie), exactly as torch.max in the reference routes
// it; the last out_features % k features, which the pooling drops, get zero gradient.
//
// avgpool_fold_linear saves nothing but the weight and bias: it is linear in them, and the
// recomputed mean-of-rows has exactly the pooling's gradient (1/k to each pooled row).
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

class MatmulAvgpoolGeluScaleMaxFunction
    : public torch::autograd::Function<MatmulAvgpoolGeluScaleMaxFunction> {
 public:
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& weight,
                            const at::Tensor& bias, int64_t pool_kernel_size,
                            double scale_factor, bool cache_folds,
                            c10::string_view numerics) {
    autograd::keep_linear_inputs(ctx, x, weight, bias);
    ctx->saved_data["pool_kernel_size"] = pool_kernel_size;
    ctx->saved_data["scale_factor"] = scale_factor;
    at::AutoDispatchBelowADInplaceOrView below_autograd;
    return fusedops::matmul_avgpool_gelu_scale_max(x, weight, bias, pool_kernel_size,
                                                   scale_factor, cache_folds, numerics);
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    const variable_list saved = autograd::kept_linear_inputs(ctx);
    const int64_t pool_kernel_size = ctx->saved_data["pool_kernel_size"].toInt();
    const double scale_factor = ctx->saved_data["scale_factor"].toDouble();

    BackwardByRecompute recompute(ctx);
    const auto [x, weight, bias] = recompute.inputs<3>(saved);
    // The reference's forward, op for op (Model98 in models/fusedops/reference.py).
    const at::Tensor y = at::linear(x, weight, bias);
    const at::Tensor pooled = at::avg_pool1d(y.unsqueeze(1), {pool_kernel_size}).squeeze(1);
    const at::Tensor scaled = at::gelu(pooled) * scale_factor;
    const at::Tensor out = std::get<0>(at::max(scaled, /*dim=*/1));

    const variable_list grads = recompute.gradients({out}, grad_outputs);
    return {grads[0], grads[1], grads[2], at::Tensor(), at::Tensor(), at::Tensor(),
            at::Tensor()};
  }
};

class AvgpoolFoldLinearFunction : public torch::autograd::Function<AvgpoolFoldLinearFunction> {
 public:
  static variable_list forward(AutogradContext* ctx, const at::Tensor& weight,
                               const at::Tensor& bias, int64_t pool_kernel_size) {
    ctx->save_for_backward({weight, bias});
    ctx->saved_data["pool_kernel_size"] = pool_kernel_size;
    at::AutoDispatchBelowADInplaceOrView below_autograd;
    auto [pooled_weight, pooled_bias] =
        fusedops::avgpool_fold_linear(weight, bias, pool_kernel_size);
    return {pooled_weight, pooled_bias};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    const variable_list saved = ctx->get_saved_variables();
    const int64_t k = ctx->saved_data["pool_kernel_size"].toInt();

    BackwardByRecompute recompute(ctx);
    const auto [weight, bias] = recompute.inputs<2>(saved);
    const int64_t pooled = weight.size(0) / k;
    // Rows r*k .. r*k+k-1 average into pooled row r; the last out % k rows are dropped.
    const at::Tensor pooled_weight =
        weight.narrow(0, 0, pooled * k).view({pooled, k, weight.size(1)}).mean(1);
    const at::Tensor pooled_bias = bias.narrow(0, 0, pooled * k).view({pooled, k}).mean(1);
    const variable_list grads = recompute.gradients({pooled_weight, pooled_bias}, grad_outputs);
    return {grads[0], grads[1], at::Tensor()};
  }
};

at::Tensor matmul_avgpool_gelu_scale_max_autograd(const at::Tensor& x, const at::Tensor& weight,
                                                  const at::Tensor& bias,
                                                  int64_t pool_kernel_size,
                                                  double scale_factor, std::optional<bool> cache_folds,
                                                  c10::string_view numerics) {
  if (!autograd::needs_autograd({x, weight, bias})) {
    at::AutoDispatchBelowADInplaceOrView below_autograd;
    return fusedops::matmul_avgpool_gelu_scale_max(x, weight, bias, pool_kernel_size,
                                                   scale_factor, cache_folds, numerics);
  }
  // Checked here first (see RecordedCall).
  checks::matmul_avgpool_gelu_scale_max(x, weight, bias, pool_kernel_size);
  const autograd::RecordedCall call(cache_folds, {weight, bias});
  return MatmulAvgpoolGeluScaleMaxFunction::apply(x, weight, bias, pool_kernel_size,
                                                  scale_factor, call.cache_folds(), numerics);
}

std::tuple<at::Tensor, at::Tensor> avgpool_fold_linear_autograd(const at::Tensor& weight,
                                                                const at::Tensor& bias,
                                                                int64_t pool_kernel_size) {
  checks::avgpool_fold_linear(weight, bias, pool_kernel_size);
  const variable_list pooled = AvgpoolFoldLinearFunction::apply(weight, bias, pool_kernel_size);
  return {pooled[0], pooled[1]};
}

}  // namespace

TORCH_LIBRARY_IMPL(fusedops, Autograd, m) {
  m.impl("matmul_avgpool_gelu_scale_max", &matmul_avgpool_gelu_scale_max_autograd);
  m.impl("avgpool_fold_linear", &avgpool_fold_linear_autograd);
}

}  // namespace fusedops
