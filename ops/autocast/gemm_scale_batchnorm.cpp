// Autocast for model 39. The reference under autocast: linear in the autocast dtype, then
// `* scale` with the float32 scale parameter, which type promotion makes float32, and
// batch_norm in float32 with float32 running statistics (updated in place), on CPU and CUDA.
// The running statistics must stay the caller's float32 tensors; scale and the BatchNorm
// parameters go in float32, x, weight and bias as autocast_helpers.h says for models 39 and 62.
#include <ATen/ATen.h>
#include <optional>

#include "autocast/autocast_helpers.h"
#include "fusedops/fusedops.h"

namespace fusedops {
namespace {

constexpr const char* kOp = "gemm_scale_batchnorm";

template <c10::DeviceType device_type>
at::Tensor gemm_scale_batchnorm_autocast(const at::Tensor& x, const at::Tensor& weight,
                                         const at::Tensor& bias, const at::Tensor& scale,
                                         const at::Tensor& bn_weight, const at::Tensor& bn_bias,
                                         at::Tensor& running_mean, at::Tensor& running_var,
                                         at::Tensor& num_batches_tracked, bool training,
                                         std::optional<double> momentum, double eps,
                                         std::optional<bool> cache_folds, c10::string_view numerics) {
  const autocast::AutocastCall<device_type> call;
  if (!call.casts(x)) {
    return gemm_scale_batchnorm(x, weight, bias, scale, bn_weight, bn_bias, running_mean,
                                running_var, num_batches_tracked, training, momentum, eps,
                                cache_folds, numerics);
  }
  const bool cuda = device_type == c10::DeviceType::CUDA;
  return gemm_scale_batchnorm(cuda ? call.to_autocast_dtype(x) : call.rounded(x),
                              call.parameter(kOp, weight, cache_folds, /*widened=*/!cuda),
                              call.parameter(kOp, bias, cache_folds, /*widened=*/true),
                              scale.to(at::kFloat),
                              bn_weight.to(at::kFloat), bn_bias.to(at::kFloat), running_mean,
                              running_var, num_batches_tracked, training, momentum, eps,
                              cache_folds, numerics);
}

}  // namespace

FUSEDOPS_AUTOCAST_IMPL("gemm_scale_batchnorm", gemm_scale_batchnorm_autocast)

}  // namespace fusedops
