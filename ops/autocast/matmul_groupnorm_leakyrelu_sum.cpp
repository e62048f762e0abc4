// Autocast for model 62. The reference under autocast: linear in the autocast dtype, then
// group_norm with the float32 affine parameters (autocast casts no parameter of it). On CUDA
// group_norm is a float32 op of the policy: it widens the Linear output and returns float32,
// and leaky_relu and the sum stay in float32. On CPU group_norm is on no list: it normalizes
// the autocast-dtype input with the float32 parameters and returns the input's dtype, as do
// leaky_relu and the sum.
// On CUDA the operator takes that as its autocast form (common/checks.h): x, weight and bias
// cast as the policy casts them (the bias widened back: every parameter after the Linear is
// float32), gamma and beta float32 (rounding them to bfloat16 moved a result by 12 units in its
// last place where gamma * x_hat and beta cancel); its Linear then runs on the tensor cores in
// the autocast dtype, with the normalization in float32 on the accumulators, and it returns
// float32, the reference's dtype. The rounding not repeated is the reference's of the Linear
// output before group_norm (this result is the closer to float64). On CPU the operator takes
// one dtype: it runs in float32 on x, weight and bias rounded to the autocast dtype (the GEMM's
// products of those values are exact in float32), and the result goes to the input's dtype.
#include <ATen/ATen.h>
#include <optional>

#include "autocast/autocast_helpers.h"
#include "fusedops/fusedops.h"

namespace fusedops {
namespace {

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
  auto rounded = [&](const at::Tensor& t) { return call.to_autocast_dtype(t).to(at::kFloat); };
  if constexpr (device_type == c10::DeviceType::CUDA) {
    return matmul_groupnorm_leakyrelu_sum(
        call.to_autocast_dtype(x), call.to_autocast_dtype(weight), rounded(bias), num_groups,
        gn_weight.to(at::kFloat), gn_bias.to(at::kFloat), eps, negative_slope, cache_folds,
        numerics);
  }
  return matmul_groupnorm_leakyrelu_sum(rounded(x), rounded(weight), rounded(bias), num_groups,
                                        gn_weight.to(at::kFloat), gn_bias.to(at::kFloat), eps,
                                        negative_slope, cache_folds, numerics)
      .to(call.dtype());
}

}  // namespace

FUSEDOPS_AUTOCAST_IMPL("matmul_groupnorm_leakyrelu_sum", matmul_groupnorm_leakyrelu_sum_autocast)

}  // namespace fusedops
