// Autograd for model 39 (Gemm_Scale_BatchNorm).
//
// Saves x, weight, bias, scale, bn_weight and bn_bias (plus training, momentum, eps), in eval
// mode also running_mean and running_var, and aside the forward's y where kept. The backward of
// a float32/float64 model (issue 40) runs the reference's ops and their backward formulas
// directly, in its order (on the CPU the gradients are the reference's bit for bit; on CUDA its
// GEMMs run on the planner's GEMM, autograd/backward_gemms.h): y = x W^T + b as the CUDA
// forward wrote it (kept, common/kept_linear.h; recomputed where a route never writes it, and
// on the CPU), z = y * scale, batch_norm's statistics and backward through the implementation
// at::batch_norm picks (ATen's, or cuDNN's where enabled), scale's gradient sum(dz y), y's
// dz * scale written over dz, then the Linear's three. Without autograd's graph over the
// recomputation, at most y, z and dz live at once (then y, dz and the product for scale's
// gradient): no more than the reference's activations.
//  - Training mode: batch_norm recomputes the batch statistics. It is given no running
//    statistics, so the backward never touches the real ones (the forward already updated them
//    once). They are not saved either: the forward's own update would invalidate them.
//  - Eval mode: batch_norm normalizes with the saved running statistics (constants).
// In float16/bfloat16 the same, in the reference's dtypes: the Linear in x's dtype, * scale
// promoting it to scale's (the autocast form's float32, as in the reference), batch_norm in
// that dtype, y's gradient back in x's dtype (backward_gemms.h).
// An empty batch, a double backward (create_graph) and a half model with numerics="eager" (the
// reference's roundings) recompute the reference chain linear -> * scale -> batch_norm under
// autograd (autograd/backward_by_recompute.h) and differentiate it.
//
// running_mean, running_var and num_batches_tracked are mutated in place (Tensor(a!) in the
// schema) and are not differentiable: their gradients are undefined, and since the kernel runs
// below ADInplaceOrView, this kernel bumps their version counters the way an in-place ATen op
// does, so autograd notices a later use of a stale saved copy.
#include <ATen/ATen.h>
#include <ATen/ExpandUtils.h>
#include <c10/core/impl/LocalDispatchKeySet.h>
#include <torch/autograd.h>
#include <torch/library.h>

#include <optional>
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

// After a training step, in both paths: the in-place update of the statistics is a new version,
// as an in-place ATen op makes it (inference tensors have no version counter).
void bump_versions(const at::Tensor& running_mean, const at::Tensor& running_var,
                   const at::Tensor& num_batches_tracked) {
  for (const at::Tensor* t : {&running_mean, &running_var, &num_batches_tracked}) {
    if (!t->is_inference()) torch::autograd::impl::bump_version(*t);
  }
}

class GemmScaleBatchnormFunction : public torch::autograd::Function<GemmScaleBatchnormFunction> {
 public:
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& weight,
                            const at::Tensor& bias, const at::Tensor& scale,
                            const at::Tensor& bn_weight, const at::Tensor& bn_bias,
                            const at::Tensor& running_mean, const at::Tensor& running_var,
                            const at::Tensor& num_batches_tracked, bool training,
                            std::optional<double> momentum, double eps, bool cache_folds,
                            c10::string_view numerics) {
    ctx->saved_data["training"] = training;
    ctx->saved_data["eps"] = eps;

    // The handles are copied only because the API takes the mutated tensors by non-const
    // reference.
    at::Tensor mean_to_update = running_mean;
    at::Tensor var_to_update = running_var;
    at::Tensor count_to_update = num_batches_tracked;
    at::Tensor out;
    const KeepLinear keep;  // y, where the CUDA kernel writes it (common/kept_linear.h)
    {
      at::AutoDispatchBelowADInplaceOrView below_autograd;
      out = fusedops::gemm_scale_batchnorm(x, weight, bias, scale, bn_weight, bn_bias,
                                           mean_to_update, var_to_update, count_to_update,
                                           training, momentum, eps, cache_folds, numerics);
    }
    if (training) bump_versions(running_mean, running_var, num_batches_tracked);
    autograd::remember_rounding(ctx, "gemm_scale_batchnorm", numerics, x);
    // The running statistics (eval mode) after the six inputs; y aside, or last
    // (keep_linear_output).
    variable_list to_save{x, weight, bias, scale, bn_weight, bn_bias};
    if (!training) to_save.insert(to_save.end(), {running_mean, running_var});
    autograd::keep_linear_output(ctx, keep, x, bias, to_save);
    ctx->save_for_backward(to_save);
    return out;
  }

  // grad_outputs by reference: autograd hands the node its only handle (CppNode), and the
  // backward drops it once consumed (below).
  static variable_list backward(AutogradContext* ctx, variable_list& grad_outputs) {
    const variable_list saved = ctx->get_saved_variables();
    if (autograd::recomputes(ctx, saved[0])) return by_recompute(ctx, saved, grad_outputs);
    const bool training = ctx->saved_data["training"].toBool();
    const double eps = ctx->saved_data["eps"].toDouble();
    const at::Tensor &x = saved[0], &weight = saved[1], &bias = saved[2], &scale = saved[3],
                     &gamma = saved[4], &beta = saved[5];
    const std::optional<at::Tensor> running_mean =
        training ? std::nullopt : std::optional<at::Tensor>(saved[6]);
    const std::optional<at::Tensor> running_var =
        training ? std::nullopt : std::optional<at::Tensor>(saved[7]);
    // In the forward's dtype (autograd/backward_by_recompute.h: the same rule).
    const c10::impl::ExcludeDispatchKeyGuard no_autocast(c10::autocast_dispatch_keyset);
    // The reference's ops and their backward formulas, in its order: the Linear (its y kept
    // from the forward, or recomputed), * scale, and batch_norm through the implementation it
    // picks (cuDNN's where it is enabled, as F.batch_norm).
    variable_list grads(14);  // x, weight, bias, scale, bn_weight, bn_bias; none for the rest
    at::Tensor dz, dgamma, dbeta;
    {
      // y (taken from ctx; a fresh y + b where the kept y has no bias) and the gradient given
      // live only until scale's gradient: the Linear's GEMMs below run without them, as
      // autograd's engine frees the reference's saved activations node by node (a step's peak
      // is at W's gradient).
      const at::Tensor y = autograd::forward_linear(ctx, saved, training ? 6 : 8, x, weight, bias);
      const at::Tensor z = y * scale;
      auto [out, save_mean, save_var_transform, reserve, impl_index] = at::_batch_norm_impl_index(
          z, gamma, beta, running_mean, running_var, training, /*momentum=*/0.0, eps,
          at::globalContext().userEnabledCuDNN());
      out.reset();  // only its statistics are needed
      // The backward formula autograd records for the implementation that ran: cuDNN's and
      // MIOpen's own in training mode, ATen's otherwise (derivatives.yaml). Not
      // at::_batch_norm_impl_index_backward: it reads sizes that torch.compile's tracing has
      // only as symbols.
      const at::Tensor& g = grad_outputs[0];
      if (training && impl_index == 1) {
        std::tie(dz, dgamma, dbeta) = at::cudnn_batch_norm_backward(
            z, g.contiguous(z.suggest_memory_format()), gamma, running_mean, running_var,
            save_mean, save_var_transform, eps, reserve);
      } else if (training && impl_index == 2) {
        std::tie(dz, dgamma, dbeta) = at::miopen_batch_norm_backward(
            z, g.contiguous(), gamma, running_mean, running_var, save_mean, save_var_transform,
            eps);
      } else {
        std::tie(dz, dgamma, dbeta) = at::native_batch_norm_backward(
            g, z, gamma, running_mean, running_var, save_mean, save_var_transform, training, eps,
            {true, true, true});
      }
      grad_outputs[0].reset();
      if (ctx->needs_input_grad(3)) grads[3] = at::sum_to(dz * y, scale.sym_sizes());
    }
    dz.mul_(scale);  // mul's gradient, in place: dz is not needed again
    autograd::linear_gradients(ctx, std::move(dz), x, weight, bias, grads);
    if (ctx->needs_input_grad(4)) grads[4] = dgamma;
    if (ctx->needs_input_grad(5)) grads[5] = dbeta;
    return grads;
  }

 private:
  static variable_list by_recompute(AutogradContext* ctx, const variable_list& saved,
                                    const variable_list& grad_outputs) {
    const bool training = ctx->saved_data["training"].toBool();
    const double eps = ctx->saved_data["eps"].toDouble();

    BackwardByRecompute recompute(ctx);
    const auto [x, weight, bias, scale, bn_weight, bn_bias] = recompute.inputs<6>(saved);
    // The running statistics are constants of the eval-mode chain (never differentiated).
    const at::Tensor running_mean = training ? at::Tensor() : saved[6].detach();
    const at::Tensor running_var = training ? at::Tensor() : saved[7].detach();

    // The reference's forward, op for op (Model39 in models/fusedops/reference.py). Momentum
    // only weighs a running-statistics update, and the recomputation makes none. In the
    // autocast form `* scale` promotes the half Linear output to float32, as it did.
    const at::Tensor z = autograd::reference_linear(x, weight, bias) * scale;
    const bool cudnn_enabled = at::globalContext().userEnabledCuDNN();  // as F.batch_norm
    const at::Tensor out = at::batch_norm(z, bn_weight, bn_bias, running_mean, running_var,
                                          training, /*momentum=*/0.0, eps, cudnn_enabled);

    const variable_list grads = recompute.gradients({out}, grad_outputs);
    // x, weight, bias, scale, bn_weight, bn_bias, then the running statistics, the batch count
    // and the five non-tensor arguments.
    return {grads[0],     grads[1],     grads[2],     grads[3],     grads[4],    grads[5],
            at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor(),
            at::Tensor(), at::Tensor()};
  }
};

at::Tensor gemm_scale_batchnorm_autograd(const at::Tensor& x, const at::Tensor& weight,
                                         const at::Tensor& bias, const at::Tensor& scale,
                                         const at::Tensor& bn_weight, const at::Tensor& bn_bias,
                                         at::Tensor& running_mean, at::Tensor& running_var,
                                         at::Tensor& num_batches_tracked, bool training,
                                         std::optional<double> momentum, double eps,
                                         std::optional<bool> cache_folds, c10::string_view numerics) {
  if (!autograd::needs_autograd({x, weight, bias, scale, bn_weight, bn_bias})) {
    at::Tensor out;
    {
      at::AutoDispatchBelowADInplaceOrView below_autograd;
      out = fusedops::gemm_scale_batchnorm(x, weight, bias, scale, bn_weight, bn_bias,
                                           running_mean, running_var, num_batches_tracked,
                                           training, momentum, eps, cache_folds, numerics);
    }
    if (training) bump_versions(running_mean, running_var, num_batches_tracked);
    return out;
  }
  // Checked here first (see RecordedCall).
  checks::gemm_scale_batchnorm(x, weight, bias, scale, bn_weight, bn_bias, running_mean,
                               running_var, num_batches_tracked, training, eps);
  // And before the kernel updates the running statistics: what autograd saves (forward above)
  // and versions must not be inference tensors (a model built under torch.inference_mode()),
  // and autograd's own refusal would come after the update: a failed call that changed the
  // model.
  constexpr const char* kOp = "gemm_scale_batchnorm";
  const std::pair<const char*, const at::Tensor&> kept[] = {
      {"x", x}, {"weight", weight}, {"bias", bias}, {"scale", scale}, {"bn_weight", bn_weight},
      {"bn_bias", bn_bias}, {"running_mean", running_mean}, {"running_var", running_var}};
  for (const auto& [name, t] : kept) checks::not_inference(kOp, name, t);
  if (training) checks::not_inference(kOp, "num_batches_tracked", num_batches_tracked);
  const autograd::RecordedCall call(cache_folds, {weight, bias, scale, bn_weight, bn_bias});
  return GemmScaleBatchnormFunction::apply(
      x, weight, bias, scale, bn_weight, bn_bias, running_mean, running_var, num_batches_tracked,
      training, momentum, eps, call.cache_folds(), numerics);
}

}  // namespace

TORCH_LIBRARY_IMPL(fusedops, Autograd, m) {
  m.impl("gemm_scale_batchnorm", &gemm_scale_batchnorm_autograd);
}

}  // namespace fusedops
