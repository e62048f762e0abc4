// Autograd for model 98 (Matmul_AvgPool_GELU_Scale_Max) and its fold helper.
//
// matmul_avgpool_gelu_scale_max saves x, weight and bias (plus the non-tensor arguments). Its
// backward is the model's own algebra (issue 40). With Wp, bp the pooled Linear (a k-window's
// mean of W's rows and b's entries: avgpool_fold_linear) and p the pooled Linear output
// (batch, out / k): h = scale gelu(p); out = max(h, 1), whose gradient goes to each row's
// argmax r (torch.max's own, on h: the first index on a tie, a NaN where there is one). With
// c_i = g_i scale gelu'(p_ir): dL/dx_i = c_i Wp[r], a row of Wp, no GEMM; dL/dWp[r] = sum of
// c_i x_i over the rows whose argmax is r (summed in the accumulation dtype), and each of W's
// k rows of window r takes 1/k of it (the rows past the last window, which the pooling drops,
// zero); the bias likewise. All of that after p is one helper operator,
// avgpool_gelu_scale_max_backward (on CUDA two kernels; on the CPU ATen's ops).
// Where p comes from:
//  - float32/float64: p = x Wp^T + bp, a GEMM k times smaller than the reference's,
//    recomputed (on CUDA on the planner's GEMM: autograd/backward_gemms.h).
//  - float16/bfloat16 (a half model, or the autocast form): the reference's own forward
//    recomputed in its dtype, without autograd: its rounded chain breaks the row maximum's
//    near-ties (one at every few windows) its own way, and its argmax, not ours, carries the
//    reference's gradient. One GEMM where the reference's backward runs two.
// A half model with numerics="eager" (the reference's roundings, common/numerics.h) and a
// double backward (create_graph) recompute the reference's chain under autograd
// (autograd/backward_by_recompute.h) and differentiate that.
//
// Wp comes from the fold cache where the forward cached it (pooled_weights), else from
// avgpool_fold_linear.
//
// avgpool_fold_linear saves nothing but the weight and bias: it is linear in them, and the
// recomputed mean-of-rows has exactly the pooling's gradient (1/k to each pooled row).
#include <ATen/ATen.h>
#include <c10/core/impl/LocalDispatchKeySet.h>
#include <torch/autograd.h>
#include <torch/library.h>

#include <array>
#include <optional>
#include <tuple>

#include "common/checks.h"
#include "common/fold_cache.h"
#include "common/operator_folds.h"
#include "autograd/backward_by_recompute.h"
#include "autograd/backward_gemms.h"
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
    autograd::remember_rounding(ctx, "matmul_avgpool_gelu_scale_max", numerics, x);
    ctx->saved_data["pool_kernel_size"] = pool_kernel_size;
    ctx->saved_data["scale_factor"] = scale_factor;
    ctx->saved_data["cache_folds"] = cache_folds;
    at::AutoDispatchBelowADInplaceOrView below_autograd;
    return fusedops::matmul_avgpool_gelu_scale_max(x, weight, bias, pool_kernel_size,
                                                   scale_factor, cache_folds, numerics);
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    const variable_list saved = autograd::kept_linear_inputs(ctx);
    if (at::GradMode::is_enabled() || ctx->saved_data["rounds"].toBool()) {
      return by_recompute(ctx, saved, grad_outputs);
    }
    const at::Tensor &x = saved[0], &weight = saved[1], &bias = saved[2];
    const int64_t k = ctx->saved_data["pool_kernel_size"].toInt();
    const double scale = ctx->saved_data["scale_factor"].toDouble();
    // In the forward's dtypes (autograd/backward_by_recompute.h: the same rule).
    const c10::impl::ExcludeDispatchKeyGuard no_autocast(c10::autocast_dispatch_keyset);
    const auto [wp, bp] = pooled_weights(ctx, weight, bias, k);
    // An inference tensor weight (a model built under inference mode) gets none, as in the
    // reference, whose Linear reaches it through a view autograd cannot track (W^T).
    const std::array<bool, 3> needed = {ctx->needs_input_grad(0),
                                        ctx->needs_input_grad(1) && !weight.is_inference(),
                                        ctx->needs_input_grad(2)};
    auto [dx, dw, db] = fusedops::avgpool_gelu_scale_max_backward(
        grad_outputs[0], pooled_linear(x, weight, bias, wp, bp, k), x, wp, k, scale,
        weight.sym_size(0).guard_int(__FILE__, __LINE__), needed);
    variable_list grads(7);  // and none for the four non-tensor arguments
    if (needed[0]) grads[0] = dx;
    if (needed[1]) grads[1] = dw;
    if (needed[2]) grads[2] = db.to(bias.scalar_type());
    return grads;
  }

 private:
  // Wp and bp: the fold the forward made and cached with W (a step's second read of all of W
  // saved), where the forward could cache (the resolved cache_folds: a raw op call recorded
  // with a weight that requires grad, as gradcheck makes, folds afresh) and that fold is in W's
  // dtype (the CPU forward folds a half W in float32); else folded again. One fold function
  // makes both (cuda/folds.h, cpu/), so the gradient's bits are the same either way.
  static std::tuple<at::Tensor, at::Tensor> pooled_weights(AutogradContext* ctx,
                                                           const at::Tensor& weight,
                                                           const at::Tensor& bias, int64_t k) {
    if (ctx->saved_data["cache_folds"].toBool()) {
      const std::optional<FoldTensors> cached = cached_fold(kAvgPoolLinearFold, k, {weight, bias});
      if (cached && (*cached)[0].scalar_type() == weight.scalar_type()) {
        return {(*cached)[0], (*cached)[1]};
      }
    }
    at::AutoDispatchBelowADInplaceOrView below_autograd;
    return fusedops::avgpool_fold_linear(weight, bias, k);
  }

  // The pooled Linear output the argmax is taken over (see the top).
  static at::Tensor pooled_linear(const at::Tensor& x, const at::Tensor& weight,
                                  const at::Tensor& bias, const at::Tensor& wp,
                                  const at::Tensor& bp, int64_t k) {
    if (!c10::isReducedFloatingType(x.scalar_type())) return autograd::backward_linear(x, wp, bp);
    const at::Tensor y = autograd::reference_linear(x, weight, bias);
    return at::avg_pool1d(y.unsqueeze(1), {k}).squeeze(1);
  }

  static variable_list by_recompute(AutogradContext* ctx, const variable_list& saved,
                                    const variable_list& grad_outputs) {
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
