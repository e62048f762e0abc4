// Meta (shape-only) kernels for model 98 and its fold helper: let torch.compile and
// torch.export trace the op with symbolic sizes.
#include <ATen/ATen.h>
#include <torch/library.h>
#include <optional>

#include "common/checks.h"
#include "common/numerics.h"

namespace fusedops {
namespace {

at::Tensor matmul_avgpool_gelu_scale_max_meta(const at::Tensor& x, const at::Tensor& weight,
                                              const at::Tensor& bias, int64_t pool_kernel_size,
                                              double scale_factor, std::optional<bool> cache_folds,
                                              c10::string_view numerics) {
  // Checked here too: a bad value fails when traced, not first when run.
  parse_numerics("matmul_avgpool_gelu_scale_max", numerics);
  checks::matmul_avgpool_gelu_scale_max(x, weight, bias, pool_kernel_size);
  return at::empty_symint({x.sym_size(0)}, x.options());
}

std::tuple<at::Tensor, at::Tensor> avgpool_fold_linear_meta(const at::Tensor& weight,
                                                            const at::Tensor& bias,
                                                            int64_t pool_kernel_size) {
  checks::avgpool_fold_linear(weight, bias, pool_kernel_size);
  c10::SymInt pooled = weight.sym_size(0) / pool_kernel_size;
  return {at::empty_symint({pooled, weight.sym_size(1)}, weight.options()),
          at::empty_symint({pooled}, bias.options())};
}

}  // namespace

TORCH_LIBRARY_IMPL(fusedops, Meta, m) {
  m.impl("matmul_avgpool_gelu_scale_max", &matmul_avgpool_gelu_scale_max_meta);
  m.impl("avgpool_fold_linear", &avgpool_fold_linear_meta);
}

}  // namespace fusedops
