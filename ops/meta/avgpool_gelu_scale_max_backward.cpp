// Meta (shape-only) kernel of model 98's backward after its pooled Linear.
#include <ATen/ATen.h>
#include <torch/library.h>

#include <array>
#include <tuple>

#include "common/checks.h"

namespace fusedops {
namespace {

std::tuple<at::Tensor, at::Tensor, at::Tensor> avgpool_gelu_scale_max_backward_meta(
    const at::Tensor& grad_out, const at::Tensor& pooled, const at::Tensor& x,
    const at::Tensor& pooled_weight, int64_t pool_kernel_size, double /*scale_factor*/,
    int64_t out_features, std::array<bool, 3> output_mask) {
  checks::avgpool_gelu_scale_max_backward(grad_out, pooled, x, pooled_weight, pool_kernel_size,
                                          out_features);
  const auto none = [&] { return at::empty({0}, x.options()); };
  return {output_mask[0] ? at::empty_symint(x.sym_sizes(), x.options()) : none(),
          output_mask[1] ? at::empty_symint({c10::SymInt(out_features), x.sym_size(1)},
                                            x.options())
                         : none(),
          output_mask[2] ? at::empty({out_features}, x.options()) : none()};
}

}  // namespace

TORCH_LIBRARY_IMPL(fusedops, Meta, m) {
  m.impl("avgpool_gelu_scale_max_backward", &avgpool_gelu_scale_max_backward_meta);
}

}  // namespace fusedops
