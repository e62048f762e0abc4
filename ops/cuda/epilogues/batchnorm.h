// Model 39's epilogue on CUDA: z = (y + b) * scale, then BatchNorm1d, as a pass over y (the
// GEMM output). Training mode: the column moments of z, the finish (mean, variance, the
// running-statistics update and num_batches_tracked, each in one place), the normalize pass;
// or, for batches up to 1024 with one scale value per column, all three in one kernel that
// holds whole columns in registers (y read once). Eval mode: the running statistics, then the
// normalize pass.
#pragma once

#include <ATen/core/Tensor.h>

#include <optional>

#include "cuda/tile_moments.h"

namespace fusedops::cuda {

struct BatchNormArgs {
  at::Tensor bias;   // (n,) contiguous; undefined when y holds it already (the eager route)
  at::Tensor scale;  // broadcasts to (batch, n), as the reference's `* scale`
  at::Tensor gamma, beta;  // (n,) contiguous
  at::Tensor running_mean, running_var, num_batches_tracked;  // updated in place in training
  bool training = true;
  std::optional<double> momentum;  // nullopt: the cumulative average (1 / num_batches_tracked)
  double eps = 1e-5;
  bool eager = false;  // the reference's rounding of z (common/numerics.h): y in out's dtype
};

// y (batch, n) in the accumulation dtype (float32, or float64), batch >= 1; out (batch, n).
// tiles: y's column moments by tiles of rows from the GEMM's epilogue (tile_moments.h), for
// training with one scale value per column and a float32 y: the statistics are merged from
// them (in double, Chan's pairwise form) and y is read once, by the normalize pass. Null: the
// statistics are taken from y.
// The most rows the pass takes in training with one read of y (the kernel that holds whole
// columns in registers): above them, column moments from the GEMM's epilogue save a read.
inline constexpr int64_t kBatchNormOnePassRows = 1024;

void scale_batchnorm_pass(const at::Tensor& y, const BatchNormArgs& args, at::Tensor& out,
                          TileMoments* tiles = nullptr);

// An empty batch still counts a training step and leaves the statistics alone.
void count_empty_batch(const at::Tensor& num_batches_tracked);

}  // namespace fusedops::cuda
