// Model 39's math after the GEMM where it is the same on every route, written once: z, the
// Linear output plus bias times the scale in the accumulation dtype (the accurate routes); in
// eval mode a column's (center, multiplier) from the running statistics; and the normalized
// output (z - center) * mul + beta (subtracting before scaling avoids the cancellation of
// z * mul + (beta - mean * mul)). The passes over y (cuda/epilogues/batchnorm.cu) and the
// skinny-half kernel's epilogue (cuda/gemm/epilogue_batchnorm_skinny.cuh) call it.
#pragma once

#include <c10/macros/Macros.h>

#include <cmath>

namespace fusedops::epilogues {

struct ScaleBatchNorm {
  template <typename y_t, typename P>
  C10_HOST_DEVICE static y_t z(y_t y, P bias, P scale) {
    return (y + static_cast<y_t>(bias)) * static_cast<y_t>(scale);
  }

  // Eval mode: 1 / sqrt(running_var + eps) in double, times gamma, rounded once.
  template <typename y_t, typename P>
  C10_HOST_DEVICE static void eval_column(P running_mean, P running_var, P gamma, double eps,
                                          y_t& center, y_t& mul) {
#if defined(__CUDA_ARCH__)
    const double invstd = 1.0 / ::sqrt(static_cast<double>(running_var) + eps);
#else
    const double invstd = 1.0 / std::sqrt(static_cast<double>(running_var) + eps);
#endif
    center = static_cast<y_t>(running_mean);
    mul = static_cast<y_t>(invstd * static_cast<double>(gamma));
  }

  template <typename y_t>
  C10_HOST_DEVICE static y_t normalize(y_t z, y_t center, y_t mul, y_t beta) {
    return (z - center) * mul + beta;
  }
};

}  // namespace fusedops::epilogues
