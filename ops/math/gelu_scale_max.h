// Model 98's math after the pooled GEMM, written once: scale * gelu(p) for one pooled value p,
// torch.max's rule for the row maximum, and GELU's derivative for the backward. The CPU kernel and the CUDA passes
// (cuda/epilogues/gelu_scale_max.cu) call it; they differ only in how they read p. Store
// (common/numerics.h) says where values are rounded to the model's dtype: the pooled value,
// GELU and the product, where the reference's avg_pool1d, gelu and `* scale_factor` write them.
#pragma once

#include <c10/macros/Macros.h>

#include <cmath>

namespace fusedops::epilogues {

template <typename T>
struct GeluScaleMax {
  T scale;

  // The exact (erf) GELU, nn.functional.gelu's default, in the order of ATen's CPU kernel.
  C10_HOST_DEVICE static T gelu(T v) {
    return v * T(0.5) * (T(1) + std::erf(v * T(0.70710678118654752440)));
  }

  // GELU's derivative times dy, in the order of ATen's gelu_backward (erf form): the gradient
  // the row's maximum sends back to its pooled value.
  C10_HOST_DEVICE static T gelu_backward(T dy, T v) {
    const T cdf = T(0.5) * (T(1) + std::erf(v * T(0.70710678118654752440)));
    const T pdf = std::exp(T(-0.5) * v * v) * T(0.39894228040143267794);  // 1/sqrt(2 pi)
    return dy * (cdf + v * pdf);
  }

  template <typename Store>
  C10_HOST_DEVICE T scaled_gelu(T p) const {
    return Store::store(Store::store(gelu(Store::store(p))) * scale);
  }

  // torch.max's rule: a NaN wins; else the larger, b when they compare equal (+0 and -0).
  C10_HOST_DEVICE static T nan_max(T a, T b) {
    if (a != a) return a;
    if (b != b) return b;
    return a > b ? a : b;
  }
};

}  // namespace fusedops::epilogues
