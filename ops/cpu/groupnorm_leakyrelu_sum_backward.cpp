// Model 62's backward after its Linear on the CPU: the reference's ops and their backward
// formulas, in its order (the gradients the reference's autograd computes, bit for bit):
// GroupNorm's output and group statistics (native_group_norm, what group_norm calls), v + v's
// gradient 2g through LeakyReLU's backward (the doubling is exact: 2 (g s) = (g + g) s for a
// power of two), GroupNorm's backward.
#include <ATen/ATen.h>
#include <torch/library.h>

#include <tuple>

#include "common/checks.h"

namespace fusedops {
namespace {

std::tuple<at::Tensor, at::Tensor, at::Tensor> groupnorm_leakyrelu_sum_backward_cpu(
    const at::Tensor& grad_out, const at::Tensor& y, const at::Tensor& gn_weight,
    const at::Tensor& gn_bias, int64_t num_groups, double eps, double negative_slope) {
  checks::groupnorm_leakyrelu_sum_backward(grad_out, y, gn_weight, gn_bias, num_groups);
  const int64_t n = y.size(0), c = y.size(1);
  at::Tensor dnormalized, mean, rstd;
  {
    at::Tensor normalized;
    std::tie(normalized, mean, rstd) =
        at::native_group_norm(y, gn_weight, gn_bias, n, c, /*HxW=*/1, num_groups, eps);
    dnormalized =
        at::leaky_relu_backward(grad_out, normalized, negative_slope, /*self_is_result=*/false)
            .mul_(2);
  }
  return at::native_group_norm_backward(dnormalized, y, mean, rstd, gn_weight, n, c, /*HxW=*/1,
                                        num_groups, {true, true, true});
}

}  // namespace

TORCH_LIBRARY_IMPL(fusedops, CPU, m) {
  m.impl("groupnorm_leakyrelu_sum_backward", &groupnorm_leakyrelu_sum_backward_cpu);
}

}  // namespace fusedops
