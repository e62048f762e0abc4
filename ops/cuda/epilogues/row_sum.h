// Model 18's two routes on CUDA: out[i] = sum_j (x W^T + b)[i, j].
#pragma once

#include <ATen/core/Tensor.h>

#include "common/fold_cache.h"

namespace fusedops::cuda {

// The folded route: out[i] = x_i . colsum(W) + sum(b), `folded` = cuda::fold_sum's {column
// sums, bias sum} in the accumulation dtype; x, weight, bias contiguous (the unfolded Linear,
// for rows that are not finite). One block per row: the floor is one read of x.
void folded_row_sums(const at::Tensor& x, const FoldTensors& folded, const at::Tensor& weight,
                     const at::Tensor& bias, at::Tensor& out);

// The eager route: out[i] = sum_j y[i, j], y (batch, out) the Linear output as the reference
// writes it (bias included, in out's float16/bfloat16); the float32 sum is rounded once, as
// torch.sum writes it.
void eager_row_sums(const at::Tensor& y, at::Tensor& out);

}  // namespace fusedops::cuda
