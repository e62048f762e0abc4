// The GEMMs of the operators' own backward passes (issue 40). On CUDA in float32/float64 they
// run on fusedops::gemm_nt, the planner's GEMM for the dtype and torch's float32 matmul
// precision: in float32 the 3xFP16 engine where it runs (PyTorch's float32 accuracy at the fp16
// tensor-core rate, where cuBLAS's float32 GEMM is a SIMT SGEMM), a copied contiguous, b^T
// passed as a view. In float16/bfloat16 (a half model, or the autocast form's Linear) and on
// the CPU, ATen's, the reference's own GEMMs: cuBLAS's half GEMM is the floor there and reads
// transposed operands as they lie, and the CPU's gradients stay the reference's bit for bit.
#pragma once

#include <ATen/ATen.h>
#include <ATen/ExpandUtils.h>
#include <ATen/SavedTensorHooks.h>
#include <torch/autograd.h>
#include <torch/csrc/autograd/graph_task.h>

#include <utility>

#include "autograd/backward_by_recompute.h"
#include "common/kept_linear.h"
#include "common/numerics.h"
#include "fusedops/fusedops.h"

namespace fusedops::autograd {

// Whether the backward's GEMMs on t run ATen's own (the CPU, float16/bfloat16; see above)
// rather than gemm_nt.
inline bool uses_atens_gemms(const at::Tensor& t) {
  return !t.is_cuda() || c10::isReducedFloatingType(t.scalar_type());
}

// a (m, k) b (k, n). b^T goes to gemm_nt as a view: its 3xFP16 engine splits it as it lies
// (no copy of W^T for dX = dY W). a by value: its contiguous copy takes its place where the
// caller gave up its own handle (W's gradient: dY goes once dY^T is copied, before the GEMM
// allocates W's gradient).
inline at::Tensor backward_mm(at::Tensor a, const at::Tensor& b) {
  if (uses_atens_gemms(a)) return a.mm(b);
  const at::Tensor rows = a.contiguous();
  a.reset();
  return fusedops::gemm_nt(rows, b.t());
}

// The forward's Linear x W^T + b again, in x's dtype (the autocast form's float32 bias rounded
// to it, as autocast cast it for the reference's Linear).
inline at::Tensor backward_linear(const at::Tensor& x, const at::Tensor& weight,
                                  const at::Tensor& bias) {
  if (uses_atens_gemms(x)) return reference_linear(x, weight, bias);
  return fusedops::gemm_nt(x, weight).add_(bias);
}

// Whether a backward of models 39 and 62 recomputes the reference's chain under autograd
// instead of running its formulas directly: for a double backward (grad mode on inside the
// backward), an empty batch (the reference's statistics of no rows), and a float16/bfloat16
// model with numerics="eager", whose backward takes the reference's own roundings as its
// forward does (common/numerics.h). `rounds`: what remember_rounding saved.
inline bool recomputes(torch::autograd::AutogradContext* ctx, const at::Tensor& x) {
  return at::GradMode::is_enabled() || ctx->saved_data["rounds"].toBool() || x.sym_size(0) == 0;
}
inline void remember_rounding(torch::autograd::AutogradContext* ctx, const char* op,
                              c10::string_view numerics, const at::Tensor& x) {
  ctx->saved_data["rounds"] = rounds_intermediates(parse_numerics(op, numerics), x.scalar_type());
}

// The y an operator's CUDA kernel handed over under `keep` (common/kept_linear.h), for the
// backward, in x's dtype: float32/float64 x: as written (the accumulation dtype); float16/
// bfloat16 x: the half routes' float32 y, with the bias, rounded to x's dtype once, as the
// reference's Linear rounds its own (the backward then runs no GEMM of the forward's width:
// the reference keeps its y too). Nothing where the backward recomputes the reference's chain
// (remember_rounding first: numerics="eager" on a half model) or nothing was kept.
// Kept in ctx->saved_data, not save_for_backward: the backward takes it out (forward_linear)
// and frees it after its last use, before the Linear's GEMMs, as autograd's engine frees the
// reference's saved y when the node that used it is done (a step's peak is at W's gradient,
// issue 40); a saved variable lives until the whole node returns. It needs none of a saved
// variable's guards: no other handle on it exists (nothing can change it in place), and it
// has no grad_fn (no reference cycle through this node). Except where saved-tensor hooks are
// set (torch.autograd.graph.saved_tensors_hooks: activation checkpointing and offloading pack
// what a node saves, to free or move it): there y goes last into `to_save`, the list the
// caller saves, so that the hooks see it as they see the reference's saved y.
inline void keep_linear_output(torch::autograd::AutogradContext* ctx, const KeepLinear& keep,
                               const at::Tensor& x, const at::Tensor& bias,
                               torch::autograd::variable_list& to_save) {
  const KeptLinear& kept = keep.kept();
  bool has_bias = false;
  if (kept.y.defined() && !ctx->saved_data["rounds"].toBool()) {
    at::Tensor y = kept.y;
    has_bias = kept.bias_added;
    if (y.scalar_type() != x.scalar_type()) {
      // In x's dtype, the bias added: one pass (the float sum rounded as it is stored, the bits
      // of (y + bias).to(dtype)), where an add and a cast read and wrote y twice (a grad-mode
      // forward's largest cost after its GEMM and BatchNorm; KernelBench's harness pays it).
      at::Tensor rounded = at::empty_like(y, y.options().dtype(x.scalar_type()));
      if (has_bias) {
        rounded.copy_(y);
      } else {
        at::add_out(rounded, y, bias);
      }
      y = std::move(rounded);
      has_bias = true;
    }
    if (at::SavedTensorDefaultHooks::get_hooks().has_value()) {
      to_save.push_back(std::move(y));
    } else {
      ctx->saved_data["y"] = std::move(y);
    }
  }
  ctx->saved_data["y_has_bias"] = has_bias;
}

// The forward's Linear x W^T + b: the y keep_linear_output kept, or recomputed where none was.
// The kept y is the saved variable after the node's `inputs` saved ones (hooks set), or taken
// out of ctx, the returned handle then the only one; a graph kept for another backward
// (retain_graph=True; also where no engine runs this backward) keeps its y for that one.
inline at::Tensor forward_linear(torch::autograd::AutogradContext* ctx,
                                 const torch::autograd::variable_list& saved, size_t inputs,
                                 const at::Tensor& x, const at::Tensor& weight,
                                 const at::Tensor& bias) {
  at::Tensor kept;
  if (saved.size() > inputs) {
    kept = saved[inputs];
  } else if (const auto it = ctx->saved_data.find("y"); it != ctx->saved_data.end()) {
    kept = it->second.toTensor();
    if (!torch::autograd::get_current_graph_task_keep_graph()) ctx->saved_data.erase(it);
  }
  if (!kept.defined()) return backward_linear(x, weight, bias);
  return ctx->saved_data["y_has_bias"].toBool() ? kept : kept + bias;
}

// The Linear's gradients from dy = dL/dy, each where autograd needs it: x's dy W, W's dy^T x,
// b's dy summed to b's shape (the operator's tensor arguments 0, 1 and 2, into grads[0..2]).
// dy goes to x's dtype first, and b's gradient to b's: in the autocast form the ops after the
// Linear ran in float32 on its widened half output, and autograd's casts do the same to the
// reference's gradients (the widening's backward rounds dy to half; the bias cast's widens).
// dy by value and W's gradient last (a step's peak is at W's gradient, issue 40): the caller
// moves its dy in, and by W's GEMM the only handle on dy's values is the one it copies.
inline void linear_gradients(torch::autograd::AutogradContext* ctx, at::Tensor dy,
                             const at::Tensor& x, const at::Tensor& weight,
                             const at::Tensor& bias, torch::autograd::variable_list& grads) {
  at::Tensor d = dy.to(x.scalar_type());
  dy.reset();  // d is dy itself, or its cast: the float32 dy of the autocast form goes now
  if (ctx->needs_input_grad(2)) {
    grads[2] = at::sum_to(d, bias.sym_sizes()).to(bias.scalar_type());
  }
  if (ctx->needs_input_grad(0)) grads[0] = backward_mm(d, weight);
  if (ctx->needs_input_grad(1)) {
    at::Tensor d_t = d.t();
    d.reset();
    grads[1] = backward_mm(std::move(d_t), x);
  }
}

}  // namespace fusedops::autograd
