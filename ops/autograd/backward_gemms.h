// The GEMMs of the operators' own backward passes (issue 40). On CUDA they run on
// fusedops::gemm_nt, the planner's GEMM for the dtype and torch's float32 matmul precision:
// in float32 the 3xFP16 engine where it runs (PyTorch's float32 accuracy at the fp16
// tensor-core rate, where cuBLAS's float32 GEMM is a SIMT SGEMM), a copied contiguous, b^T
// passed as a view. On the CPU, ATen's, so that the gradients there stay the reference's bit
// for bit.
#pragma once

#include <ATen/ATen.h>
#include <ATen/ExpandUtils.h>
#include <torch/autograd.h>

#include "autograd/backward_by_recompute.h"
#include "common/kept_linear.h"
#include "fusedops/fusedops.h"

namespace fusedops::autograd {

// a (m, k) b (k, n). b^T goes to gemm_nt as a view: its 3xFP16 engine splits it as it lies
// (no copy of W^T for dX = dY W).
inline at::Tensor backward_mm(const at::Tensor& a, const at::Tensor& b) {
  if (!a.is_cuda()) return a.mm(b);
  return fusedops::gemm_nt(a.contiguous(), b.t());
}

// The forward's Linear x W^T + b again (x, W and b of one dtype).
inline at::Tensor backward_linear(const at::Tensor& x, const at::Tensor& weight,
                                  const at::Tensor& bias) {
  if (!x.is_cuda()) return reference_linear(x, weight, bias);
  return fusedops::gemm_nt(x, weight).add_(bias);
}

// The y an operator's CUDA kernel handed over under `keep` (common/kept_linear.h), for the
// backward: kept where it is x's dtype (float32/float64 x: the accumulation dtype; a half
// forward's backward recomputes its chain), whether it holds the bias in the context.
// Undefined where nothing was kept.
inline at::Tensor keep_linear_output(torch::autograd::AutogradContext* ctx,
                                     const KeepLinear& keep, const at::Tensor& x) {
  const KeptLinear& kept = keep.kept();
  const bool usable = kept.y.defined() && kept.y.scalar_type() == x.scalar_type();
  ctx->saved_data["y_has_bias"] = usable && kept.bias_added;
  return usable ? kept.y : at::Tensor();
}

// The forward's Linear x W^T + b: the y keep_linear_output saved (`kept`), or recomputed.
inline at::Tensor forward_linear(torch::autograd::AutogradContext* ctx, const at::Tensor& kept,
                                 const at::Tensor& x, const at::Tensor& weight,
                                 const at::Tensor& bias) {
  if (!kept.defined()) return backward_linear(x, weight, bias);
  return ctx->saved_data["y_has_bias"].toBool() ? kept : kept + bias;
}

// The Linear's gradients from dy = dL/dy, each where autograd needs it: x's dy W, W's dy^T x,
// b's dy summed to b's shape (the operator's tensor arguments 0, 1 and 2, into grads[0..2]).
inline void linear_gradients(torch::autograd::AutogradContext* ctx, const at::Tensor& dy,
                             const at::Tensor& x, const at::Tensor& weight,
                             const at::Tensor& bias, torch::autograd::variable_list& grads) {
  if (ctx->needs_input_grad(0)) grads[0] = backward_mm(dy, weight);
  if (ctx->needs_input_grad(1)) grads[1] = backward_mm(dy.t(), x);
  if (ctx->needs_input_grad(2)) grads[2] = at::sum_to(dy, bias.sym_sizes());
}

}  // namespace fusedops::autograd
