// Autocast for model 39. The reference under autocast: linear in the autocast dtype, then
// `* scale` with the float32 scale parameter, which type promotion makes float32, and
// batch_norm in float32 with float32 running statistics (updated in place), on CPU and CUDA.
// The running statistics must stay the caller's float32 tensors. On CUDA the operator takes
// the autocast form (common/checks.h): x, weight and bias cast as the policy casts them (the
// bias widened back: every parameter after the Linear is float32), scale and the BatchNorm
// parameters float32; its Linear then runs on the tensor cores in the autocast dtype and the
// rest in float32 on the accumulators. On CPU the operator takes one dtype: it runs in float32
// on x, weight and bias rounded to the autocast dtype (the GEMM's products of those values are
// exact in float32, as in the reference's reduced-precision GEMM). Either way the one rounding
// not repeated is the reference's of the Linear output to the autocast dtype before the
// product (this result is the closer to float64).
#include <ATen/ATen.h>
#include <optional>


#include "autocast/autocast_helpers.h"
#include "fusedops/fusedops.h"

namespace fusedops {
namespace {

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
  // The Linear's operands as the policy rounds them, widened to the chain's float32.
  auto rounded = [&](const at::Tensor& t) { return call.to_autocast_dtype(t).to(at::kFloat); };
  const bool cuda = device_type == c10::DeviceType::CUDA;
  return gemm_scale_batchnorm(cuda ? call.to_autocast_dtype(x) : rounded(x),
                              cuda ? call.to_autocast_dtype(weight) : rounded(weight),
                              rounded(bias), scale.to(at::kFloat),
                              bn_weight.to(at::kFloat), bn_bias.to(at::kFloat), running_mean,
                              running_var, num_batches_tracked, training, momentum, eps,
                              cache_folds, numerics);
}

}  // namespace

FUSEDOPS_AUTOCAST_IMPL("gemm_scale_batchnorm", gemm_scale_batchnorm_autocast)

}  // namespace fusedops
