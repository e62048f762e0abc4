// Meta (shape-only) kernel of model 62's backward after its Linear.
#include <ATen/ATen.h>
#include <torch/library.h>

#include <tuple>

#include "common/checks.h"

namespace fusedops {
namespace {

std::tuple<at::Tensor, at::Tensor, at::Tensor> groupnorm_leakyrelu_sum_backward_meta(
    const at::Tensor& grad_out, const at::Tensor& y, const at::Tensor& gn_weight,
    const at::Tensor& gn_bias, int64_t num_groups, double /*eps*/, double /*negative_slope*/) {
  checks::groupnorm_leakyrelu_sum_backward(grad_out, y, gn_weight, gn_bias, num_groups);
  return {at::empty_symint(y.sym_sizes(), y.options()),
          at::empty_symint(gn_weight.sym_sizes(), gn_weight.options()),
          at::empty_symint(gn_bias.sym_sizes(), gn_bias.options())};
}

}  // namespace

TORCH_LIBRARY_IMPL(fusedops, Meta, m) {
  m.impl("groupnorm_leakyrelu_sum_backward", &groupnorm_leakyrelu_sum_backward_meta);
}

}  // namespace fusedops
