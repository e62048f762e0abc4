// Meta (shape-only) kernels for model 18 and its fold helper.
#include <ATen/ATen.h>
#include <torch/library.h>
#include <optional>

#include "common/checks.h"
#include "common/numerics.h"

namespace fusedops {
namespace {

at::Tensor matmul_sum_max_avgpool_logsumexp_logsumexp_meta(const at::Tensor& x,
                                                           const at::Tensor& weight,
                                                           const at::Tensor& bias,
                                                           std::optional<bool> cache_folds,
                                                           c10::string_view numerics) {
  // Checked here too: a bad value fails when traced, not first when run.
  parse_numerics("matmul_sum_max_avgpool_logsumexp_logsumexp", numerics);
  checks::matmul_sum_max_avgpool_logsumexp_logsumexp(x, weight, bias);
  return at::empty_symint({x.sym_size(0), c10::SymInt(1)}, x.options());
}

std::tuple<at::Tensor, at::Tensor> sum_fold_linear_meta(const at::Tensor& weight,
                                                        const at::Tensor& bias) {
  checks::sum_fold_linear(weight, bias);
  return {at::empty_symint({weight.sym_size(1)}, weight.options()),
          at::empty_symint(c10::SymIntArrayRef{}, bias.options())};
}

}  // namespace

TORCH_LIBRARY_IMPL(fusedops, Meta, m) {
  m.impl("matmul_sum_max_avgpool_logsumexp_logsumexp",
         &matmul_sum_max_avgpool_logsumexp_logsumexp_meta);
  m.impl("sum_fold_linear", &sum_fold_linear_meta);
}

}  // namespace fusedops
