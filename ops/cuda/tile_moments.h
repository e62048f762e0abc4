// Column moments of y by tiles of rows: what a GEMM's column-moments epilogue hands an
// operator that needs column statistics (gemm/gemm_3xfp16.h and gemm/gemm_half.h write them,
// epilogues/batchnorm.h merges them), so that they need no pass over y of their own.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>

namespace fusedops::cuda {

struct TileMoments {
  int64_t rows = 0;  // a tile's rows; the last tile holds what is left of the batch
  at::Tensor mean;   // float32 (ceil(batch / rows), n): each tile's column means
  at::Tensor m2;     // ... and sums of squared deviations from those means
  bool written = false;  // false: nothing wrote them; the BatchNorm pass takes them from y
  // int32 on the device, or undefined: when its first element is not 0, rows of y changed
  // after the moments were taken (the 3xFP16 engine's guarded rows, recomputed exactly), and
  // the BatchNorm pass takes them from y again, on the GPU, without a host round trip.
  at::Tensor changed_rows;
};

// Empty moments for a (batch, n) y, tiles of `rows`.
TileMoments make_tile_moments(int64_t batch, int64_t n, int64_t rows, const at::Tensor& like);

}  // namespace fusedops::cuda
