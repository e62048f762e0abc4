// The GEMM helper a b^T on CUDA: the planner's unfused route for the dtype and torch's float32
// matmul precision (cuda/linear.h), no fold kept (b is an operand of one call: a backward
// pass's transposed weight or activation, taken as a view where it is one). The result in a's
// dtype.
#include <ATen/ATen.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/library.h>

#include "common/checks.h"
#include "common/fold_cache.h"
#include "cuda/linear.h"

namespace fusedops {
namespace {

at::Tensor gemm_nt_cuda(const at::Tensor& a, const at::Tensor& b) {
  checks::gemm_nt(a, b);
  const OperatorCall call("gemm_nt", /*cache_folds=*/false);
  const c10::cuda::CUDAGuard device_guard(a.device());
  // b as it lies where it is a transposed matrix (a backward pass's W^T or x^T: run_linear's
  // 3xFP16 routes read it so, the others copy it), else contiguous.
  const at::Tensor ac = a.contiguous();
  const at::Tensor bc = b.is_contiguous() || b.t().is_contiguous() ? b : b.contiguous();
  const cuda::PlannedLinear planned =
      cuda::plan_linear(cuda::LinearNeeds{"gemm_nt"}, ac, bc, Numerics::kAccurate,
                        /*cache_folds=*/false);
  const at::Tensor y =
      cuda::run_linear(planned, ac, bc, /*bias=*/at::Tensor(), b, /*cache_folds=*/false).y;
  return y.scalar_type() == a.scalar_type() ? y : y.to(a.scalar_type());
}

}  // namespace

TORCH_LIBRARY_IMPL(fusedops, CUDA, m) { m.impl("gemm_nt", &gemm_nt_cuda); }

}  // namespace fusedops
