// Autocast for model 62. The reference under autocast: linear in the autocast dtype, then
// group_norm. On CUDA group_norm is a float32 op of the policy: it widens the Linear output
// and returns float32, and leaky_relu and the sum stay in float32. On CPU group_norm is on no
// list: it takes the autocast-dtype input with the float32 affine parameters and returns the
// input's dtype, as do leaky_relu and the sum. Here the operator runs in the autocast dtype
// (the affine parameters cast with it) and its result is widened to float32 on CUDA: the
// normalized values are rounded to the autocast dtype where the CUDA reference keeps them in
// float32, one unit in their last place at most.
#include <ATen/ATen.h>
#include <torch/library.h>

#include "autocast/autocast_helpers.h"
#include "fusedops/fusedops.h"

namespace fusedops {
namespace {

template <c10::DeviceType device_type>
at::Tensor matmul_groupnorm_leakyrelu_sum_autocast(const at::Tensor& x, const at::Tensor& weight,
                                                   const at::Tensor& bias, int64_t num_groups,
                                                   const at::Tensor& gn_weight,
                                                   const at::Tensor& gn_bias, double eps,
                                                   double negative_slope, bool cache_folds,
                                                   c10::string_view numerics) {
  const autocast::AutocastCall<device_type> call;
  if (!call.casts(x)) {
    return matmul_groupnorm_leakyrelu_sum(x, weight, bias, num_groups, gn_weight, gn_bias, eps,
                                          negative_slope, cache_folds, numerics);
  }
  const at::Tensor out = matmul_groupnorm_leakyrelu_sum(
      call.to_autocast_dtype(x), call.to_autocast_dtype(weight), call.to_autocast_dtype(bias),
      num_groups, call.to_autocast_dtype(gn_weight), call.to_autocast_dtype(gn_bias), eps,
      negative_slope, cache_folds, numerics);
  return device_type == c10::DeviceType::CUDA ? out.to(at::kFloat) : out;
}

}  // namespace

TORCH_LIBRARY_IMPL(fusedops, AutocastCPU, m) {
  m.impl("matmul_groupnorm_leakyrelu_sum",
         &matmul_groupnorm_leakyrelu_sum_autocast<c10::DeviceType::CPU>);
}

TORCH_LIBRARY_IMPL(fusedops, AutocastCUDA, m) {
  m.impl("matmul_groupnorm_leakyrelu_sum",
         &matmul_groupnorm_leakyrelu_sum_autocast<c10::DeviceType::CUDA>);
}

}  // namespace fusedops
