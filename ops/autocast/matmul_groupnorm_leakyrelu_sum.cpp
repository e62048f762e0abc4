// Autocast for model 62. The reference under autocast: linear in the autocast dtype, then
// group_norm with the float32 affine parameters (autocast casts no parameter of it). On CUDA
// group_norm is a float32 op of the policy: it widens the Linear output and returns float32,
// and leaky_relu and the sum stay in float32. On CPU group_norm is on no list: it normalizes
// the autocast-dtype input with the float32 parameters and returns the input's dtype, as do
// leaky_relu and the sum.
// x, weight and bias go in as autocast_helpers.h says for models 39 and 62; gamma and beta in
// float32 (rounding them to bfloat16 moved a result by 12 units in its last place where
// gamma * x_hat and beta cancel). On CUDA the result is float32, the reference's dtype; on CPU
// it goes to the input's dtype.
#include <ATen/ATen.h>
#include <optional>

#include "autocast/autocast_helpers.h"
#include "fusedops/fusedops.h"

namespace fusedops {
namespace {

constexpr const char* kOp = "matmul_groupnorm_leakyrelu_sum";

template <c10::DeviceType device_type>
at::Tensor matmul_groupnorm_leakyrelu_sum_autocast(const at::Tensor& x, const at::Tensor& weight,
                                                   const at::Tensor& bias, int64_t num_groups,
                                                   const at::Tensor& gn_weight,
                                                   const at::Tensor& gn_bias, double eps,
                                                   double negative_slope, std::optional<bool> cache_folds,
                                                   c10::string_view numerics) {
  const autocast::AutocastCall<device_type> call;
  if (!call.casts(x)) {
    return matmul_groupnorm_leakyrelu_sum(x, weight, bias, num_groups, gn_weight, gn_bias, eps,
                                          negative_slope, cache_folds, numerics);
  }
  if constexpr (device_type == c10::DeviceType::CUDA) {
    return matmul_groupnorm_leakyrelu_sum(
        call.to_autocast_dtype(x), call.parameter(kOp, weight, cache_folds),
        call.parameter(kOp, bias, cache_folds, /*widened=*/true), num_groups,
        gn_weight.to(at::kFloat), gn_bias.to(at::kFloat), eps, negative_slope, cache_folds,
        numerics);
  }
  return matmul_groupnorm_leakyrelu_sum(call.rounded(x),
                                        call.parameter(kOp, weight, cache_folds, true),
                                        call.parameter(kOp, bias, cache_folds, true), num_groups,
                                        gn_weight.to(at::kFloat),
                                        gn_bias.to(at::kFloat), eps, negative_slope, cache_folds,
                                        numerics)
      .to(call.dtype());
}

}  // namespace

FUSEDOPS_AUTOCAST_IMPL("matmul_groupnorm_leakyrelu_sum", matmul_groupnorm_leakyrelu_sum_autocast)

}  // namespace fusedops
