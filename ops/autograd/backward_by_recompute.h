// The backward shared by every fusedops autograd kernel: recompute the operator's reference
// chain with differentiable ATen ops from the saved inputs, and differentiate that.
//
// Why recompute: the fused forward never materializes the reference's intermediates (the GEMM
// output, pooled values, batch statistics), so saving only the op's inputs keeps no
// (batch, out_features) activation alive between forward and backward; and differentiating the
// reference's own ATen chain gives exactly the reference's gradient semantics (torch.max's
// argmax routing, BatchNorm's batch-statistics terms, ...) on every device and dtype, with the
// backward kernels PyTorch already tunes.
//
// Use, in a torch::autograd::Function's backward:
//   BackwardByRecompute recompute(ctx);                 // from here on the chain is recorded
//   at::Tensor x = recompute.input(saved[0], 0);        // 0: x's index among the tensor args
//   (or: const auto [x, weight, bias] = recompute.inputs<3>(saved);)
//   ...reference chain from x ... -> out
//   variable_list grads = recompute.gradients({out}, grad_outputs);
#pragma once

#include <ATen/ATen.h>
#include <c10/core/impl/LocalDispatchKeySet.h>
#include <torch/autograd.h>

#include <array>
#include <functional>
#include <initializer_list>
#include <optional>
#include <string>
#include <vector>

#include "common/fold_cache.h"

namespace fusedops::autograd {

// Whether a call must be recorded for autograd: grad mode on and some tensor argument requires
// grad. When not (inference, torch.no_grad, frozen weights), the Autograd kernels call the
// backend kernel directly: building and discarding an autograd::Function costs host time.
inline bool needs_autograd(std::initializer_list<std::reference_wrapper<const at::Tensor>> args) {
  if (!at::GradMode::is_enabled()) return false;
  for (const at::Tensor& t : args) {
    if (t.defined() && t.requires_grad()) return true;
  }
  return false;
}

// A call that autograd records. It resolves the fold cache's rule (common/fold_cache.h, "When
// folds are cached") for the kernel below: the caller's cache_folds where given, else no cache
// when a parameter (any tensor argument but x) requires grad. And for its lifetime it tells the
// planner whether the call trains its weights (TrainingCall). Every Autograd kernel makes one
// around Function::apply, after checking the arguments itself: autograd's bookkeeping would
// otherwise trip over a bad argument (an undefined tensor has no device) before the kernel's
// own message.
class RecordedCall {
 public:
  RecordedCall(std::optional<bool> cache_folds,
               std::initializer_list<std::reference_wrapper<const at::Tensor>> parameters)
      : trains_(needs_autograd(parameters)),
        cache_folds_(cache_folds.value_or(!trains_)),
        training_(trains_) {}
  bool cache_folds() const { return cache_folds_; }

 private:
  bool trains_;
  bool cache_folds_;
  TrainingCall training_;
};

// The Linear's inputs (x, weight, bias), kept for the backward's recomputation. Saved with
// save_for_backward, so that autograd refuses a backward after an in-place write to one of them;
// except an inference tensor (a model built under torch.inference_mode()) that the reference's
// Linear does not save: the reference keeps x for the weight's gradient, the weight for x's and
// nothing of the bias, so a model whose weights are inference tensors runs with grad mode on
// (issue 36); such a tensor is kept as a plain value (it has no version counter, and nothing
// outside inference mode can write it). An inference tensor the reference saves is saved, and
// fails as the reference does. `output`, where given, is the forward's result, saved after
// them (autograd keeps an output without a reference cycle and refuses a backward after an
// in-place write to it, as for the reference's ops that save their result).
inline void keep_linear_inputs(torch::autograd::AutogradContext* ctx, const at::Tensor& x,
                               const at::Tensor& weight, const at::Tensor& bias,
                               const at::Tensor& output = at::Tensor()) {
  const bool saved_by_reference[] = {weight.requires_grad(), x.requires_grad(), false};
  const at::Tensor* inputs[] = {&x, &weight, &bias};
  torch::autograd::variable_list saved;
  for (size_t i = 0; i < 3; ++i) {
    const at::Tensor& t = *inputs[i];
    if (t.defined() && t.is_inference() && !saved_by_reference[i]) {
      ctx->saved_data["linear_input_" + std::to_string(i)] = t;
      saved.emplace_back();
    } else {
      saved.push_back(t);
    }
  }
  if (output.defined()) saved.push_back(output);
  ctx->save_for_backward(saved);
}

// What keep_linear_inputs kept, in the order x, weight, bias (and the output, where given).
inline torch::autograd::variable_list kept_linear_inputs(torch::autograd::AutogradContext* ctx) {
  torch::autograd::variable_list kept = ctx->get_saved_variables();
  for (size_t i = 0; i < kept.size(); ++i) {
    const auto plain = ctx->saved_data.find("linear_input_" + std::to_string(i));
    if (plain != ctx->saved_data.end()) kept[i] = plain->second.toTensor();
  }
  return kept;
}

// Lives for the whole backward: it sets up the recording of the recomputation (see the
// guards below) and collects its inputs.
class BackwardByRecompute {
 public:
  explicit BackwardByRecompute(torch::autograd::AutogradContext* ctx)
      : ctx_(ctx), create_graph_(at::GradMode::is_enabled()) {}

  // A saved input as a starting point of the recomputed chain. `tensor_index` is its position
  // among the forward's tensor arguments (its autograd edge); its gradient is computed iff the
  // caller needs it.
  //
  // Normally a detached alias, so the recomputation is a private graph that the caller's graph
  // never sees. Under create_graph the saved tensor itself: the gradients then stay connected to
  // the caller's graph through every input, and double backward is exact too.
  at::Tensor input(const at::Tensor& saved, size_t tensor_index) {
    const bool needed = ctx_->needs_input_grad(tensor_index);
    at::Tensor start = saved;
    // An inference tensor (keep_linear_inputs) is used as it is, as the reference uses it:
    // outside inference mode nothing may set requires_grad on it or make a view of it that
    // autograd tracks, so the reference's gradient reaches it only where its ops use it
    // directly (the Linear's bias), and none reaches it through a view (the weight's W^T).
    if (saved.is_inference()) {
      inputs_.push_back(start);
      needed_.push_back(needed && saved.requires_grad());
      return start;
    }
    if (!create_graph_ || (needed && !saved.requires_grad())) {
      start = saved.detach();
      if (needed) start.requires_grad_(true);
    }
    inputs_.push_back(start);
    needed_.push_back(needed);
    return start;
  }

  // input(saved[i], i) for the first N saved inputs, whose positions among the forward's tensor
  // arguments are their positions in `saved`.
  template <size_t N>
  std::array<at::Tensor, N> inputs(const torch::autograd::variable_list& saved) {
    std::array<at::Tensor, N> started;
    for (size_t i = 0; i < N; ++i) started[i] = input(saved[i], i);
    return started;
  }

  // The vector-Jacobian product of the recomputed outputs with grad_outputs (the backward's
  // incoming gradients, one per output of the op) for every input() in call order: undefined
  // where the caller does not need it, zeros where the outputs do not depend on it.
  torch::autograd::variable_list gradients(
      const torch::autograd::variable_list& outputs,
      const torch::autograd::variable_list& grad_outputs) const {
    torch::autograd::variable_list wanted;
    for (size_t i = 0; i < inputs_.size(); ++i) {
      if (needed_[i]) wanted.push_back(inputs_[i]);
    }
    // An output that depends on no needed input (a fold helper's bias part when only the
    // weight needs a gradient) was recomputed without a graph: it contributes nothing, and
    // autograd::grad refuses it.
    torch::autograd::variable_list recorded, recorded_grads;
    for (size_t i = 0; i < outputs.size(); ++i) {
      if (outputs[i].requires_grad()) {
        recorded.push_back(outputs[i]);
        recorded_grads.push_back(grad_outputs[i]);
      }
    }
    torch::autograd::variable_list grads(inputs_.size());
    if (wanted.empty()) return grads;
    const torch::autograd::variable_list computed =
        recorded.empty() ? torch::autograd::variable_list(wanted.size())
                         : torch::autograd::grad(recorded, wanted, recorded_grads,
                                                 /*retain_graph=*/std::nullopt, create_graph_,
                                                 /*allow_unused=*/true);
    size_t next = 0;
    for (size_t i = 0; i < inputs_.size(); ++i) {
      if (!needed_[i]) continue;
      const at::Tensor& grad = computed[next++];
      // None for an inference tensor no gradient reached (the reference leaves it so).
      grads[i] = grad.defined() || inputs_[i].is_inference() ? grad : at::zeros_like(inputs_[i]);
    }
    return grads;
  }

 private:
  torch::autograd::AutogradContext* ctx_;
  // The grad mode the engine runs backward in, read before record_ below turns it on: it is on
  // only for backward(create_graph=True), where the gradients must be differentiable too.
  bool create_graph_;
  // Grad mode on: the engine runs backward with it off, and the recomputation must be recorded.
  torch::autograd::AutoGradMode record_{true};
  // Autocast off: the chain is recomputed in the dtypes of the saved inputs, the dtypes the
  // forward ran in. A backward() inside an autocast region would otherwise redo the GEMM in
  // bfloat16/float16, and could move model 98's argmax away from the forward's.
  c10::impl::ExcludeDispatchKeyGuard no_autocast_{c10::autocast_dispatch_keyset};
  std::vector<at::Tensor> inputs_;
  std::vector<bool> needed_;
};

// The reference's Linear as it ran. In the autocast form (common/checks.h: x and weight
// float16/bfloat16, bias and the later parameters float32) autocast had cast the bias to x's
// dtype; the recomputation (autocast off) casts it so, and the gradient flows back through the
// cast to the float32 bias, as in the reference.
inline at::Tensor reference_linear(const at::Tensor& x, const at::Tensor& weight,
                                   const at::Tensor& bias) {
  return at::linear(x, weight,
                    bias.scalar_type() == x.scalar_type() ? bias : bias.to(x.scalar_type()));
}

}  // namespace fusedops::autograd
