// Model 62's epilogue as a pass over y (the unfused routes): out = 2 * LeakyReLU(GroupNorm(y +
// bias)), one read of y and one write of out. The fused route runs the same math inside the
// half-precision GEMM instead (cuda/epilogues/groupnorm_leakyrelu_sum_sm90.cuh).
#pragma once

#include <ATen/core/Tensor.h>

namespace fusedops::cuda {

// y (batch, hidden) in the accumulation dtype, or in out's dtype (the eager route's Linear
// output as the reference stores it); bias, gamma, beta (hidden,) contiguous in out's dtype,
// bias undefined when y holds it already (the eager route); out (batch, hidden).
// eager: the reference's roundings (common/numerics.h) and its statistics (the file comment).
void groupnorm_leakyrelu_sum_pass(const at::Tensor& y, const at::Tensor& bias, int64_t num_groups,
                                  const at::Tensor& gamma, const at::Tensor& beta, double eps,
                                  double negative_slope, bool eager, at::Tensor& out);

// Model 62's backward after the Linear, one pass over y and grad_out (all (batch, hidden),
// contiguous, one dtype; y with the bias added; gamma and beta (hidden,) contiguous in that
// dtype): grad_y, and per element dn xhat and dn in `partials` (2, batch, hidden) in the
// accumulation dtype, whose column sums are gamma's and beta's gradients.
void groupnorm_leakyrelu_sum_backward_pass(const at::Tensor& y, const at::Tensor& grad_out,
                                           int64_t num_groups, const at::Tensor& gamma,
                                           const at::Tensor& beta, double eps,
                                           double negative_slope, at::Tensor& grad_y,
                                           at::Tensor& partials);

}  // namespace fusedops::cuda
