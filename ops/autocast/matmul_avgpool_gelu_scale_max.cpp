// Autocast for model 98. The reference under autocast: linear in the autocast dtype, then
// avg_pool1d, gelu, `* scale_factor` and max, none of them on a policy list, all in that dtype.
// So every tensor goes to the autocast dtype and the result stays in it.
#include <ATen/ATen.h>
#include <optional>

#include "autocast/autocast_helpers.h"
#include "fusedops/fusedops.h"

namespace fusedops {
namespace {

constexpr const char* kOp = "matmul_avgpool_gelu_scale_max";

template <c10::DeviceType device_type>
at::Tensor matmul_avgpool_gelu_scale_max_autocast(const at::Tensor& x, const at::Tensor& weight,
                                                  const at::Tensor& bias,
                                                  int64_t pool_kernel_size, double scale_factor,
                                                  std::optional<bool> cache_folds, c10::string_view numerics) {
  const autocast::AutocastCall<device_type> call;
  if (!call.casts(x)) {
    return matmul_avgpool_gelu_scale_max(x, weight, bias, pool_kernel_size, scale_factor,
                                         cache_folds, numerics);
  }
  return matmul_avgpool_gelu_scale_max(call.to_autocast_dtype(x),
                                       call.parameter(kOp, weight, cache_folds),
                                       call.parameter(kOp, bias, cache_folds), pool_kernel_size,
                                       scale_factor, cache_folds, numerics);
}

}  // namespace

FUSEDOPS_AUTOCAST_IMPL("matmul_avgpool_gelu_scale_max", matmul_avgpool_gelu_scale_max_autocast)

}  // namespace fusedops
