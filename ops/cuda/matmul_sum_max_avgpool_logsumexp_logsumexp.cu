// Model 18 on CUDA, a composition: sum_j (x W^T + b)_j = x . colsum(W) + sum(b), so the
// planned route is a matrix-vector product with the column sums (a fold cached with W:
// cuda/folds.h), whose floor is one read of x; "eager" numerics need each y[i, j] rounded as
// the reference writes it, so that route runs the full GEMM and sums its rows
// (cuda/epilogues/row_sum.h).
#include <ATen/ATen.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/library.h>
#include <optional>

#include "common/checks.h"
#include "common/numerics.h"
#include "common/operator_folds.h"
#include "cuda/epilogues/row_sum.h"
#include "cuda/folds.h"
#include "cuda/linear.h"

namespace fusedops {
namespace {

at::Tensor matmul_sum_max_avgpool_logsumexp_logsumexp_cuda(const at::Tensor& x,
                                                           const at::Tensor& weight,
                                                           const at::Tensor& bias,
                                                           std::optional<bool> cache_folds_arg,
                                                           c10::string_view numerics) {
  const Numerics mode = parse_numerics("matmul_sum_max_avgpool_logsumexp_logsumexp", numerics);
  const OperatorCall call("matmul_sum_max_avgpool_logsumexp_logsumexp", cache_folds_arg);
  const bool cache_folds = call.cache_folds();
  checks::matmul_sum_max_avgpool_logsumexp_logsumexp(x, weight, bias);
  const c10::cuda::CUDAGuard device_guard(x.device());
  const at::Tensor xc = x.contiguous(), wc = weight.contiguous(), bc = bias.contiguous();
  at::Tensor out = at::empty({xc.size(0), 1}, x.options());
  if (xc.size(0) == 0) return out;
  // Only the row sums of y: the GEMM folds to a matvec.
  cuda::LinearNeeds needs{"matmul_sum_max_avgpool_logsumexp_logsumexp"};
  needs.epilogue = plan::Epilogue::kRowSum;
  const cuda::PlannedLinear planned = cuda::plan_linear(needs, xc, wc, mode, cache_folds);
  if (planned.plan.route == plan::Route::kFoldedMatvec) {
    const at::ScalarType acc_dtype = x.scalar_type() == at::kDouble ? at::kDouble : at::kFloat;
    const FoldTensors folded = fold_weights(kSumLinearFold, 0, {weight, bias}, cache_folds,
                                            [&] { return cuda::fold_sum(wc, bc, acc_dtype); });
    cuda::folded_row_sums(xc, folded, wc, bc, out);
    return out;
  }
  cuda::eager_row_sums(cuda::run_linear(planned, xc, wc, bc, weight, cache_folds).y, out);
  return out;
}

std::tuple<at::Tensor, at::Tensor> sum_fold_linear_cuda(const at::Tensor& weight,
                                                        const at::Tensor& bias) {
  checks::sum_fold_linear(weight, bias);
  const c10::cuda::CUDAGuard device_guard(weight.device());
  const FoldTensors folded = cuda::fold_sum(weight, bias, weight.scalar_type());
  return {folded[0], folded[1]};
}

}  // namespace

TORCH_LIBRARY_IMPL(fusedops, CUDA, m) {
  m.impl("matmul_sum_max_avgpool_logsumexp_logsumexp",
         &matmul_sum_max_avgpool_logsumexp_logsumexp_cuda);
  m.impl("sum_fold_linear", &sum_fold_linear_cuda);
}

}  // namespace fusedops
