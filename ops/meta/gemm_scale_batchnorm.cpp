// Meta (shape-only) kernel for model 39. The running statistics are mutated in place by the
// real kernels; here they are only checked.
#include <ATen/ATen.h>
#include <torch/library.h>
#include <optional>

#include "common/checks.h"
#include "common/numerics.h"

namespace fusedops {
namespace {

at::Tensor gemm_scale_batchnorm_meta(const at::Tensor& x, const at::Tensor& weight,
                                     const at::Tensor& bias, const at::Tensor& scale,
                                     const at::Tensor& bn_weight, const at::Tensor& bn_bias,
                                     at::Tensor& running_mean, at::Tensor& running_var,
                                     at::Tensor& num_batches_tracked, bool training,
                                     std::optional<double> momentum, double eps, std::optional<bool> cache_folds,
                                     c10::string_view numerics) {
  // Checked here too: a bad value fails when traced, not first when run.
  parse_numerics("gemm_scale_batchnorm", numerics);
  checks::gemm_scale_batchnorm(x, weight, bias, scale, bn_weight, bn_bias, running_mean,
                               running_var, num_batches_tracked, training, eps);
  return at::empty_symint({x.sym_size(0), weight.sym_size(0)},
                          x.options().dtype(checks::params_dtype(x, bias)));
}

}  // namespace

TORCH_LIBRARY_IMPL(fusedops, Meta, m) {
  m.impl("gemm_scale_batchnorm", &gemm_scale_batchnorm_meta);
}

}  // namespace fusedops
