// The 3xTF32 engine: float32-accurate y = x W^T from three TF32 tensor-core products through
// cuBLAS, where the 3xFP16 engine cannot run (A100-class GPUs, builds without sm_90a).
#pragma once

#include <ATen/core/Tensor.h>

namespace fusedops::cuda::gemm {

// y (M, N) float32 = x (M, K) W (N, K)^T, x and weight contiguous float32 on the current
// device; `chunk` the K-chunk between promotions (settings: FUSEDOPS_3XTF32_CHUNK). W's split
// is a fold cached on weight_key (the caller's weight tensor) when cache_folds.
void tf32x3_linear(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& weight_key,
                   bool cache_folds, int64_t chunk, at::Tensor& y);

}  // namespace fusedops::cuda::gemm
