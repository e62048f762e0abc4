// Model 62's backward after its Linear on CUDA: one pass over y and grad_out
// (cuda/epilogues/groupnorm_leakyrelu_sum.h) for y's gradient and the per-element terms of
// gamma's and beta's, then one column reduction of both. It replaces ATen's GroupNorm forward
// again, LeakyReLU's backward and GroupNorm's backward (five kernels, two of them slow at
// groups of a few channels with one value per channel) in a training step (issue 40).
#include <ATen/ATen.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/library.h>

#include <tuple>

#include "common/checks.h"
#include "cuda/epilogues/groupnorm_leakyrelu_sum.h"

namespace fusedops {
namespace {

std::tuple<at::Tensor, at::Tensor, at::Tensor> groupnorm_leakyrelu_sum_backward_cuda(
    const at::Tensor& grad_out, const at::Tensor& y, const at::Tensor& gn_weight,
    const at::Tensor& gn_bias, int64_t num_groups, double eps, double negative_slope) {
  checks::groupnorm_leakyrelu_sum_backward(grad_out, y, gn_weight, gn_bias, num_groups);
  const c10::cuda::CUDAGuard device_guard(y.device());
  const at::Tensor yc = y.contiguous(), gc = grad_out.contiguous();
  const at::Tensor gamma = gn_weight.contiguous(), beta = gn_bias.contiguous();
  at::Tensor grad_y = at::empty_like(yc);
  const at::ScalarType acc = y.scalar_type() == at::kDouble ? at::kDouble : at::kFloat;
  at::Tensor partials = at::empty({2, y.size(0), y.size(1)}, y.options().dtype(acc));
  if (y.numel() > 0) {
    cuda::groupnorm_leakyrelu_sum_backward_pass(yc, gc, num_groups, gamma, beta, eps,
                                                negative_slope, grad_y, partials);
  }
  // Two sums, not views of one: the schema's outputs do not alias each other. Zeros for no rows.
  return {grad_y, partials[0].sum(0).to(y.scalar_type()), partials[1].sum(0).to(y.scalar_type())};
}

}  // namespace

TORCH_LIBRARY_IMPL(fusedops, CUDA, m) {
  m.impl("groupnorm_leakyrelu_sum_backward", &groupnorm_leakyrelu_sum_backward_cuda);
}

}  // namespace fusedops
