// Model 39 in eval mode inside the skinny-half kernel (gemv_half_kernel.cuh): BatchNorm with
// running statistics is a per-column affine map, so each element of the block's tile goes
// straight to out (epilogues/scale_batchnorm.h): one kernel for the whole operator at small
// batch, y never written.
#pragma once

#include <cstdint>

#include "epilogues/scale_batchnorm.h"

namespace fusedops::cuda::gemm {

// P: the type of the per-column vectors and out (the model's dtype, or float32 in the
// autocast form). scale[j * scale_stride] is column j's scale.
template <typename P>
struct SkinnyBatchNormEvalStore {
  const P* bias;
  const P* scale;
  int64_t scale_stride;
  const P* gamma;
  const P* beta;
  const P* running_mean;
  const P* running_var;
  P* out;
  double eps;

  template <int kRows, int kCols>
  __device__ __forceinline__ void apply(float* tile, int row0, int m, int n, int threads) const {
    using Math = epilogues::ScaleBatchNorm;
    // A column's (center, multiplier) once (a double square root and division), in the second
    // warp's slots, free after the reduction.
    float* center = tile + kRows * kCols;
    float* mul = center + kRows;
    for (int r = threadIdx.x; r < kRows; r += threads) {
      const int j = min(row0 + r, n - 1);
      Math::eval_column(running_mean[j], running_var[j], gamma[j], eps, center[r], mul[r]);
    }
    __syncthreads();
    for (int i = threadIdx.x; i < kRows * kCols; i += threads) {
      const int r = i % kRows, c = i / kRows, j = row0 + r;
      if (j >= n || c >= m) continue;
      const float z = Math::z(tile[r * kCols + c], bias[j], scale[j * scale_stride]);
      out[static_cast<int64_t>(c) * n + j] =
          static_cast<P>(Math::normalize(z, center[r], mul[r], static_cast<float>(beta[j])));
    }
  }
};

}  // namespace fusedops::cuda::gemm
