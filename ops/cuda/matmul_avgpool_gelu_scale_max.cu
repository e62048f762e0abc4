// Model 98 on CUDA, a composition: AvgPool1d(k) of a Linear is the Linear with k-row means
// (the fold, cached with W: cuda/folds.h), so the GEMM shrinks from N = out to N = out / k;
// then the planned GEMM and the row epilogue (bias, exact GELU, scale, NaN-propagating max:
// cuda/epilogues/gelu_scale_max.h). On a fused route the epilogue sums the engine's K-slice
// partials as it reads them (y is never written): the 3xFP16 engine's on Hopper in float32 at
// large batches, the weight-streaming kernels' at few rows (there in the same launch).
#include <ATen/ATen.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/library.h>
#include <optional>

#include "common/checks.h"
#include "common/numerics.h"
#include "common/operator_folds.h"
#include "cuda/epilogues/gelu_scale_max.h"
#include "cuda/folds.h"
#include "cuda/gemm/gemm_3xfp16.h"
#include "cuda/gemm/skinny_half.h"
#include "cuda/linear.h"

namespace fusedops {
namespace {

at::Tensor matmul_avgpool_gelu_scale_max_cuda(const at::Tensor& x, const at::Tensor& weight,
                                              const at::Tensor& bias, int64_t pool_kernel_size,
                                              double scale_factor, std::optional<bool> cache_folds_arg,
                                              c10::string_view numerics) {
  const Numerics mode = parse_numerics("matmul_avgpool_gelu_scale_max", numerics);
  const OperatorCall call("matmul_avgpool_gelu_scale_max", cache_folds_arg);
  const bool cache_folds = call.cache_folds();
  checks::matmul_avgpool_gelu_scale_max(x, weight, bias, pool_kernel_size);
  const c10::cuda::CUDAGuard device_guard(x.device());
  const at::Tensor xc = x.contiguous();
  const int64_t batch = xc.size(0);
  at::Tensor out = at::empty({batch}, x.options());
  if (batch == 0) return out;
  const FoldTensors folded =
      fold_weights(kAvgPoolLinearFold, pool_kernel_size, {weight, bias}, cache_folds,
                   [&] { return cuda::fold_avgpool(weight, bias, pool_kernel_size); });
  const at::Tensor& pooled_weight = folded[0];
  cuda::GeluScaleMaxArgs args{folded[1], xc, weight.contiguous(), bias.contiguous(),
                              pool_kernel_size, scale_factor,
                              rounds_intermediates(mode, x.scalar_type())};
  // A row reduction of the pooled GEMM's output; it reads the partials 4 columns at a time
  // with the pooled bias beside them.
  cuda::LinearNeeds needs{"matmul_avgpool_gelu_scale_max"};
  needs.epilogue = plan::Epilogue::kRowReduction;
  needs.epilogue_fits = pooled_weight.size(0) % 4 == 0;
  needs.folded_weight = true;
  const cuda::PlannedLinear planned =
      cuda::plan_linear(needs, xc, pooled_weight, mode, cache_folds);
  // A fused route: the engine leaves K-slice partials, the epilogue sums them.
  const plan::Route route = planned.plan.route;
  const int sm_count = planned.request.device.sm_count;
  cuda::gemm::Partials3xFp16 partials;
  bool partials_made = false;
  if (route == plan::Route::kSkinnyHalfFused || route == plan::Route::kSkinny3xFp16Fused) {
    cuda::gemm::SkinnyOperands ops;
    partials_made = cuda::gemm::skinny_operands(xc, pooled_weight, pooled_weight, cache_folds, ops);
    // One launch where the grid fits the device at once: the GEMM's blocks read back their
    // own partials (a second kernel costs a launch on the host and a gap on the GPU).
    if (partials_made && cuda::gelu_scale_max_skinny(ops, sm_count, pooled_weight, args, out)) {
      return out;
    }
    if (partials_made) cuda::gemm::skinny_partials(ops, sm_count, partials);
  } else if (const auto products = plan::fp16_products(route);
             products && plan::fused_route(route)) {
    partials_made = cuda::gemm::linear_nt_3xfp16_partials(xc, pooled_weight, pooled_weight,
                                                          cache_folds, *products, sm_count,
                                                          partials);
  }
  if (partials_made) {
    cuda::gelu_scale_max_partials(partials, pooled_weight, args, out);
    return out;
  }
  const at::Tensor p =
      cuda::run_linear(planned, xc, pooled_weight, at::Tensor(), pooled_weight, cache_folds).y;
  cuda::gelu_scale_max_pass(p, args, out);
  return out;
}

std::tuple<at::Tensor, at::Tensor> avgpool_fold_linear_cuda(const at::Tensor& weight,
                                                            const at::Tensor& bias,
                                                            int64_t pool_kernel_size) {
  checks::avgpool_fold_linear(weight, bias, pool_kernel_size);
  const c10::cuda::CUDAGuard device_guard(weight.device());
  const FoldTensors folded = cuda::fold_avgpool(weight, bias, pool_kernel_size);
  return {folded[0], folded[1]};
}

}  // namespace

TORCH_LIBRARY_IMPL(fusedops, CUDA, m) {
  m.impl("matmul_avgpool_gelu_scale_max", &matmul_avgpool_gelu_scale_max_cuda);
  m.impl("avgpool_fold_linear", &avgpool_fold_linear_cuda);
}

}  // namespace fusedops
