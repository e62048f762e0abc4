// Meta (shape-only) kernel for model 62.
#include <ATen/ATen.h>
#include <torch/library.h>
#include <optional>

#include "common/checks.h"
#include "common/numerics.h"

namespace fusedops {
namespace {

at::Tensor matmul_groupnorm_leakyrelu_sum_meta(const at::Tensor& x, const at::Tensor& weight,
                                               const at::Tensor& bias, int64_t num_groups,
                                               const at::Tensor& gn_weight,
                                               const at::Tensor& gn_bias, double eps,
                                               double negative_slope, std::optional<bool> cache_folds,
                                               c10::string_view numerics) {
  // Checked here too: a bad value fails when traced, not first when run.
  parse_numerics("matmul_groupnorm_leakyrelu_sum", numerics);
  checks::matmul_groupnorm_leakyrelu_sum(x, weight, bias, num_groups, gn_weight, gn_bias);
  return at::empty_symint({x.sym_size(0), weight.sym_size(0)},
                          x.options().dtype(checks::params_dtype(x, bias)));
}

}  // namespace

TORCH_LIBRARY_IMPL(fusedops, Meta, m) {
  m.impl("matmul_groupnorm_leakyrelu_sum", &matmul_groupnorm_leakyrelu_sum_meta);
}

}  // namespace fusedops
