// The skinny engine: float32 y = x W^T for at most 4 rows of x (batch-1 serving), bound by
// reading W once.
#pragma once

#include <ATen/core/Tensor.h>

namespace fusedops::cuda::gemm {

// x (M <= 4, K) and weight (N, K) contiguous float32 with 16-byte aligned rows (K a multiple
// of 4, aligned base pointers: the planner's kSkinny rule); y (M, N) float32. sm_count: the
// device's SMs, to split K between warps where N alone would leave SMs idle.
void skinny_linear(const at::Tensor& x, const at::Tensor& weight, at::Tensor& y, int sm_count);

}  // namespace fusedops::cuda::gemm
