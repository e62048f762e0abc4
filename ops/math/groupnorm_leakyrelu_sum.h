// Model 62's math after the GEMM, written once: for one group of one row, the mean and 1/std
// from its sums (two passes: the mean, then the squared deviations from it), and per channel
// the affine map, LeakyReLU and the doubling. The CPU kernel, the CUDA kernels and the CUTLASS
// epilogue inside the half-precision GEMM (cuda/epilogues/groupnorm_leakyrelu_sum_sm90.cuh) all call
// it; they differ only in how they read a group and reduce its sums. Store (common/numerics.h)
// says where values are rounded to the model's dtype: the GroupNorm and LeakyReLU outputs,
// as the reference writes them; the doubling v + v is exact.
#pragma once

#include <c10/macros/Macros.h>

#include <cmath>

namespace fusedops::epilogues {

template <typename T>
struct GroupNormLeakyReluSum {
  T eps;
  T negative_slope;

  C10_HOST_DEVICE static T mean(T sum, T count) { return sum / count; }

  // 1 / sqrt(var + eps), var the biased variance.
  C10_HOST_DEVICE T rstd(T squared_deviations, T count) const {
    return inv_std(squared_deviations / count);
  }

  // The same two for a count that is a power of two, given 1 / count: scaling by a power of two
  // is exact, so the product and the quotient round the same value (bit-identical results)
  // and the division, a slow instruction sequence on the GPU, is left out. The fused GEMM's
  // epilogue takes only such group sizes.
  C10_HOST_DEVICE static T mean_pow2(T sum, T inv_count) { return sum * inv_count; }
  C10_HOST_DEVICE T rstd_pow2(T squared_deviations, T inv_count) const {
    return inv_std(squared_deviations * inv_count);
  }

  // One channel's output from its value less the group mean.
  template <typename Store>
  C10_HOST_DEVICE T output(T centered, T rstd, T gamma, T beta) const {
    const T v = Store::store(centered * rstd * gamma + beta);
    // torch's leaky_relu: v > 0 ? v : v * slope (NaN takes the second branch and stays NaN).
    const T leaky = Store::store(v > T(0) ? v : v * negative_slope);
    return leaky + leaky;
  }

 private:
  // 1 / sqrt(var + eps), the one formula both rstd forms round through.
  C10_HOST_DEVICE T inv_std(T var) const {
#if defined(__CUDA_ARCH__)
    return T(1) / ::sqrt(var + eps);
#else
    return T(1) / std::sqrt(var + eps);
#endif
  }
};

}  // namespace fusedops::epilogues
