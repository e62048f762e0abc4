// Model 39's math after the GEMM, written once: z, the Linear output plus bias times the scale
// in the accumulation dtype (the accurate routes); a column's multiplier gamma / sqrt(var +
// eps); the normalized output (z - center) * mul + beta (subtracting before scaling avoids the
// cancellation of z * mul + (beta - mean * mul)); and the running-statistics update. The CPU
// kernel, the passes over y (cuda/epilogues/batchnorm.cu) and the skinny-half kernel's
// epilogue (cuda/epilogues/scale_batchnorm_skinny.cu) call it.
//
// Two formulas have two operation orders, each kept where it was so that results stay
// bit-identical (they differ in the last bit of a double): the multiplier, gamma divided by
// the square root on the CPU, 1 / sqrt times gamma on CUDA; and the running variance, f * var
// * (count / (count - 1)) on the CPU, f * (var * count / (count - 1)) on CUDA.
#pragma once

#include <c10/macros/Macros.h>

#include <cmath>
#include <cstdint>

namespace fusedops::epilogues {

struct ScaleBatchNorm {
  template <typename y_t, typename P>
  C10_HOST_DEVICE static y_t z(y_t y, P bias, P scale) {
    return (y + static_cast<y_t>(bias)) * static_cast<y_t>(scale);
  }

  // A column's multiplier (the two orders above); on CUDA also times the scale, where the
  // statistics are y's.
  C10_HOST_DEVICE static double invstd(double var, double eps) {
    return 1.0 / std::sqrt(var + eps);
  }
  static double multiplier(double gamma, double var, double eps) {
    return gamma / std::sqrt(var + eps);
  }

  // Eval mode on CUDA: 1 / sqrt(running_var + eps) in double, times gamma, rounded once.
  template <typename y_t, typename P>
  C10_HOST_DEVICE static void eval_column(P running_mean, P running_var, P gamma, double eps,
                                          y_t& center, y_t& mul) {
    center = static_cast<y_t>(running_mean);
    mul = static_cast<y_t>(invstd(static_cast<double>(running_var), eps) *
                           static_cast<double>(gamma));
  }

  template <typename y_t>
  C10_HOST_DEVICE static y_t normalize(y_t z, y_t center, y_t mul, y_t beta) {
    return (z - center) * mul + beta;
  }

  // A training step's weight for the batch's statistics: momentum, or with momentum=None the
  // cumulative average's 1 / num_batches_tracked counting this step (`before`: not counting it).
  C10_HOST_DEVICE static double factor(bool cumulative, double momentum, int64_t before) {
    return cumulative ? 1.0 / static_cast<double>(before + 1) : momentum;
  }

  // A running statistic after a training step: (1 - f) running + f batch_value.
  C10_HOST_DEVICE static double blend(double running, double batch_value, double f) {
    return (1.0 - f) * running + f * batch_value;
  }

  // The running variance takes the unbiased batch variance (biased var over count samples).
  C10_HOST_DEVICE static double running_var(double running, double var, double count, double f) {
    return blend(running, var * count / (count - 1.0), f);
  }
  static double running_var_cpu(double running, double var, double count, double f) {
    return (1.0 - f) * running + f * var * (count / (count - 1.0));
  }
};

}  // namespace fusedops::epilogues
