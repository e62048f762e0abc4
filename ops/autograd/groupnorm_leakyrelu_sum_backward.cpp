// Autograd for model 62's backward helper: none. Model 62's own backward calls it with grad
// mode off; a double backward (create_graph) recomputes the reference's chain under autograd
// instead (autograd/matmul_groupnorm_leakyrelu_sum.cpp). A call that autograd would record is
// refused by name, rather than giving outputs without a gradient.
#include <ATen/ATen.h>
#include <torch/autograd.h>
#include <torch/library.h>

#include <tuple>

#include "autograd/backward_by_recompute.h"
#include "fusedops/fusedops.h"

namespace fusedops {
namespace {

std::tuple<at::Tensor, at::Tensor, at::Tensor> groupnorm_leakyrelu_sum_backward_autograd(
    const at::Tensor& grad_out, const at::Tensor& y, const at::Tensor& gn_weight,
    const at::Tensor& gn_bias, int64_t num_groups, double eps, double negative_slope) {
  TORCH_CHECK(!autograd::needs_autograd({grad_out, y, gn_weight, gn_bias}),
              "groupnorm_leakyrelu_sum_backward: is not differentiable; call it with grad mode "
              "off (torch.no_grad()) or with inputs that do not require grad, got an input that "
              "requires grad with grad mode on");
  at::AutoDispatchBelowADInplaceOrView below_autograd;
  return fusedops::groupnorm_leakyrelu_sum_backward(grad_out, y, gn_weight, gn_bias, num_groups,
                                                    eps, negative_slope);
}

}  // namespace

TORCH_LIBRARY_IMPL(fusedops, Autograd, m) {
  m.impl("groupnorm_leakyrelu_sum_backward", &groupnorm_leakyrelu_sum_backward_autograd);
}

}  // namespace fusedops
