// Helpers shared by the CPU kernels in this folder.
#pragma once

#include <ATen/ATen.h>

#include <algorithm>
#include <vector>

namespace fusedops::cpu {

// ATen's own at::internal::GRAIN_SIZE: below about this many elements a task costs more to
// hand to another thread than to run.
constexpr int64_t kElementsPerTask = 32768;

// The at::parallel_for grain for a loop whose every index touches `elements_per_index`
// elements.
inline int64_t grain_for(int64_t elements_per_index) {
  return std::max<int64_t>(1, kElementsPerTask / std::max<int64_t>(1, elements_per_index));
}

// The unfolded Linear, x[rows] W^T + b, in x_acc's (the accumulation) dtype: (rows, out).
// The weight folds of models 98 and 18 reassociate sums, which is exact for finite values but
// not for inf and NaN (inf * w_a + inf * w_b with mixed signs is NaN unfolded, +-inf folded).
// Rows whose folded result is not finite are recomputed here, the reference's way.
inline at::Tensor linear_of_rows(const at::Tensor& x_acc, const at::Tensor& weight,
                                 const at::Tensor& bias, const std::vector<int64_t>& rows) {
  const at::Tensor index =
      at::tensor(at::ArrayRef<int64_t>(rows), x_acc.options().dtype(at::kLong));
  const at::Tensor x_rows = x_acc.index_select(0, index);
  const at::ScalarType acc = x_acc.scalar_type();
  return at::addmm(bias.to(acc), x_rows, weight.to(acc).t()).contiguous();
}

}  // namespace fusedops::cpu
