// The operators' weight folds on CUDA (their kinds: common/operator_folds.h): computed once per
// weight and cached with it by the operators (common/fold_cache.h).
#pragma once

#include <ATen/core/Tensor.h>

#include "common/fold_cache.h"

namespace fusedops::cuda {

// Model 98: AvgPool1d(k) of a Linear is the Linear with k-row means: {pooled weight
// (out / k, in), pooled bias (out / k,)} in the weight's dtype; rows past (out / k) * k are
// dropped, as AvgPool1d's floor does. Sums in double.
FoldTensors fold_avgpool(const at::Tensor& weight, const at::Tensor& bias, int64_t pool);

// Model 18: {column sums of W (in,), sum of b ()} in `out_dtype`, in double, in a fixed order
// (deterministic).
FoldTensors fold_sum(const at::Tensor& weight, const at::Tensor& bias, at::ScalarType out_dtype);

}  // namespace fusedops::cuda
