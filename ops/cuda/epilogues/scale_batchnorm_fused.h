// (x W^T + bias) * scale, then BatchNorm with running statistics, inside the skinny-half
// kernel (scale_batchnorm_skinny.cu): in eval mode BatchNorm is a per-column affine map
// (plan::Epilogue::kColumnAffine), so each element of the block's tile goes straight to out, y
// never written: one kernel for the whole operator at few rows. The math is
// math/scale_batchnorm.h, as in the unfused pass. (Training's column moments come from
// the engines themselves: gemm/gemm_half.h, gemm/gemm_3xfp16.h.)
#pragma once

#include <ATen/core/Tensor.h>

#include "cuda/gemm/skinny_half.h"

namespace fusedops::cuda {

// scale (N,) with any stride; bias, gamma, beta, running_mean, running_var (N) contiguous and
// out (M, N), all in x's dtype or all float32 (the autocast form, and float32 itself).
void scale_batchnorm_eval_skinny(const gemm::SkinnyOperands& ops, const at::Tensor& bias,
                                 const at::Tensor& scale, const at::Tensor& gamma,
                                 const at::Tensor& beta, const at::Tensor& running_mean,
                                 const at::Tensor& running_var, double eps, at::Tensor& out,
                                 int sm_count);

}  // namespace fusedops::cuda
