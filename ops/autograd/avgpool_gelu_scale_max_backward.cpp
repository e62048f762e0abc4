// Autograd for model 98's backward helper: none. Model 98's own backward calls it with grad
// mode off; a double backward (create_graph) recomputes the reference's chain under autograd
// instead (autograd/matmul_avgpool_gelu_scale_max.cpp). A call that autograd would record is
// refused by name, rather than giving outputs without a gradient.
#include <ATen/ATen.h>
#include <torch/autograd.h>
#include <torch/library.h>

#include <array>
#include <tuple>

#include "autograd/backward_by_recompute.h"
#include "fusedops/fusedops.h"

namespace fusedops {
namespace {

std::tuple<at::Tensor, at::Tensor, at::Tensor> avgpool_gelu_scale_max_backward_autograd(
    const at::Tensor& grad_out, const at::Tensor& pooled, const at::Tensor& x,
    const at::Tensor& pooled_weight, int64_t pool_kernel_size, double scale_factor,
    int64_t out_features, std::array<bool, 3> output_mask) {
  TORCH_CHECK(!autograd::needs_autograd({grad_out, pooled, x, pooled_weight}),
              "avgpool_gelu_scale_max_backward: is not differentiable; call it with grad mode "
              "off (torch.no_grad()) or with inputs that do not require grad, got an input that "
              "requires grad with grad mode on");
  at::AutoDispatchBelowADInplaceOrView below_autograd;
  return fusedops::avgpool_gelu_scale_max_backward(grad_out, pooled, x, pooled_weight,
                                                   pool_kernel_size, scale_factor, out_features,
                                                   output_mask);
}

}  // namespace

TORCH_LIBRARY_IMPL(fusedops, Autograd, m) {
  m.impl("avgpool_gelu_scale_max_backward", &avgpool_gelu_scale_max_backward_autograd);
}

}  // namespace fusedops
