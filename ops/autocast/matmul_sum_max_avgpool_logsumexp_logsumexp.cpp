// Autocast for model 18. The reference under autocast: linear in the autocast dtype, then
// sum(dim=1). On CUDA the policy runs sum with dtype=float32 (fp32_set_opt_dtype) and
// logsumexp in float32, so the reference returns float32; on CPU neither is on a policy list
// and the result stays in the autocast dtype. Here the operator runs in the autocast dtype and
// its result is widened to float32 on CUDA: the sum is rounded to the autocast dtype once more
// than the reference rounds it, one unit in its last place at most.
#include <ATen/ATen.h>
#include <optional>

#include "autocast/autocast_helpers.h"
#include "fusedops/fusedops.h"

namespace fusedops {
namespace {

constexpr const char* kOp = "matmul_sum_max_avgpool_logsumexp_logsumexp";

template <c10::DeviceType device_type>
at::Tensor matmul_sum_max_avgpool_logsumexp_logsumexp_autocast(const at::Tensor& x,
                                                               const at::Tensor& weight,
                                                               const at::Tensor& bias,
                                                               std::optional<bool> cache_folds,
                                                               c10::string_view numerics) {
  const autocast::AutocastCall<device_type> call;
  if (!call.casts(x)) {
    return matmul_sum_max_avgpool_logsumexp_logsumexp(x, weight, bias, cache_folds, numerics);
  }
  const at::Tensor out = matmul_sum_max_avgpool_logsumexp_logsumexp(
      call.to_autocast_dtype(x), call.parameter(kOp, weight, cache_folds),
      call.parameter(kOp, bias, cache_folds), cache_folds, numerics);
  return device_type == c10::DeviceType::CUDA ? out.to(at::kFloat) : out;
}

}  // namespace

FUSEDOPS_AUTOCAST_IMPL("matmul_sum_max_avgpool_logsumexp_logsumexp",
                       matmul_sum_max_avgpool_logsumexp_logsumexp_autocast)

}  // namespace fusedops
